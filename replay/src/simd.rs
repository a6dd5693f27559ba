//! Runtime dispatch of streaming loops to the widest vector ISA the CPU has.
//!
//! The binary is built for baseline x86-64 (SSE2) so it runs anywhere, but one core's streaming
//! bandwidth depends on the access width: on the AMD EPYC (Zen 5) development machine, a triad
//! loop of 16-byte SSE2 accesses reached 0.90 of gcc -O3 -march=native's 64-byte loop, the same
//! Rust loop compiled for AVX-512 1.00 (medians of 10 interleaved runs). [`multiversion!`]
//! compiles one loop body three times (AVX-512, AVX2, baseline) and picks at run time.
//!
//! Only plain streaming loops go through here: for index-driven gathers LLVM may emit vector
//! gather instructions under AVX-512, which are several times slower than scalar loads on some
//! CPUs (Zen: 4.8 vs 26 GB/s), so kernels with indices stay scalar.

/// Defines a function whose body is compiled for AVX-512F, AVX2+FMA and the baseline, and
/// dispatched on `is_x86_feature_detected!` (cached by std after the first call).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) $body
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $body
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU supports every feature avx512() was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU supports every feature avx2() was compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            fn baseline($($arg: $ty),*) $body
            baseline($($arg),*)
        }
    };
}

multiversion! {
    /// `dst = src` (STREAM Copy).
    pub(crate) fn copy(dst: &mut [f64], src: &[f64]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s;
        }
    }
}

multiversion! {
    /// `dst = q * src` (STREAM Scale).
    pub(crate) fn scale(dst: &mut [f64], src: &[f64], q: f64) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = q * s;
        }
    }
}

multiversion! {
    /// `dst = x + y` (STREAM Add).
    pub(crate) fn add(dst: &mut [f64], x: &[f64], y: &[f64]) {
        for ((d, &x), &y) in dst.iter_mut().zip(x).zip(y) {
            *d = x + y;
        }
    }
}

multiversion! {
    /// `dst = y + q * z` (STREAM Triad).
    pub(crate) fn triad(dst: &mut [f64], y: &[f64], z: &[f64], q: f64) {
        for ((d, &y), &z) in dst.iter_mut().zip(y).zip(z) {
            *d = y + q * z;
        }
    }
}

multiversion! {
    /// `dst = value` (first touch of arrays).
    pub(crate) fn fill(dst: &mut [f64], value: f64) {
        for d in dst.iter_mut() {
            *d = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_loops_compute_stream_formulas() {
        let x: Vec<f64> = (0..37).map(|i| i as f64).collect();
        let y: Vec<f64> = (0..37).map(|i| 2.0 * i as f64).collect();
        let mut d = vec![0.0; 37];
        copy(&mut d, &x);
        assert_eq!(d, x);
        scale(&mut d, &x, 3.0);
        assert_eq!(d[5], 15.0);
        add(&mut d, &x, &y);
        assert_eq!(d[7], 21.0);
        triad(&mut d, &x, &y, 3.0);
        assert_eq!(d[2], 2.0 + 3.0 * 4.0);
        fill(&mut d, 1.5);
        assert!(d.iter().all(|&v| v == 1.5));
    }
}
