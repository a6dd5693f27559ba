//! Builds the QEMU plugin (`capture/qemu-plugin`, a cdylib) and embeds it in the `mgbench`
//! binary, so that every way of building mgbench gives a working `capture`: `cargo build
//! --release` without `--workspace`, and `cargo install --path .` (whose binary lives far from
//! any build tree). At run time the bytes are written once to a cache directory and handed to
//! QEMU (mgbench_capture::backend::qemu::embed_plugin).
//!
//! The plugin is built by a nested `cargo build --release` in its own target directory beside
//! this profile's (`target/plugin-build`): the outer build holds the lock on its own, and the
//! nested one is incremental across rebuilds.

use std::path::{Path, PathBuf};
use std::process::Command;

const PLUGIN_FILE: &str = "libmgbench_qemu_plugin.so";

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for input in [
        "capture/qemu-plugin/src",
        "capture/qemu-plugin/Cargo.toml",
        "capture/src",
        "capture/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=MGBENCH_SKIP_PLUGIN_EMBED");
    println!("cargo:rerun-if-env-changed=CI");
    let embedded = out.join(PLUGIN_FILE);
    // Escape hatch for environments that cannot run a nested build (the binary then looks
    // for the plugin beside itself, as before).
    if std::env::var_os("MGBENCH_SKIP_PLUGIN_EMBED").is_some() {
        // CI must test the binary users get: the embedded plugin, not a fallback.
        if std::env::var_os("CI").is_some() {
            panic!("MGBENCH_SKIP_PLUGIN_EMBED is set under CI: unset it (CI tests the embedded plugin)");
        }
        std::fs::write(&embedded, []).expect("write OUT_DIR");
        name_plugin(&[]);
        return;
    }
    // OUT_DIR = <target>/<profile>/build/<package-hash>/out.
    let target = out
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out.join("target"));
    let plugin_target = target.join("plugin-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--release", "-p", "mgbench-qemu-plugin", "--lib"])
        .arg("--target-dir")
        .arg(&plugin_target);
    // Debug info would make the binary tens of MiB larger; QEMU needs only the dynamic
    // symbols, which stripping keeps.
    cmd.env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    if std::env::var_os("CARGO_NET_OFFLINE").is_some() {
        cmd.arg("--offline");
    }
    // The outer build's settings are not the plugin's: a lint driver (clippy) or flags meant
    // for the outer target must not leak into the nested build.
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot start cargo to build the QEMU plugin: {e}");
    });
    if !status.success() {
        panic!(
            "building the QEMU plugin (capture/qemu-plugin) failed; see the messages above \
             (set MGBENCH_SKIP_PLUGIN_EMBED=1 to build mgbench without it)"
        );
    }
    let built = plugin_target.join("release").join(PLUGIN_FILE);
    let bytes = std::fs::read(&built)
        .unwrap_or_else(|e| panic!("cannot read the built plugin {}: {e}", built.display()));
    std::fs::write(&embedded, &bytes)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", embedded.display()));
    name_plugin(&bytes);
}

/// Gives the binary the hash of the embedded plugin's bytes (`MGBENCH_PLUGIN_HASH`), which
/// names its cached copy: FNV-1a, a name, not a security check (the cache directory is the
/// user's own). Hashed here once rather than by every run.
fn name_plugin(bytes: &[u8]) {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    println!("cargo:rustc-env=MGBENCH_PLUGIN_HASH={hash:016x}");
}
