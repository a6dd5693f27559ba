//! Where recorded accesses wait for the writer: slots of the spill file (layout and states in
//! `mgbench_capture::spill`), mapped shared with mgbench, which writes whatever they still
//! hold into the trace if QEMU dies without running the plugin's exit hook.
//!
//! Without `spill=PATH` (the plugin run by hand) the slots are private memory: the same code,
//! nothing to recover after a kill.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use mgbench_capture::spill::{
    counter_lane, encode_info, slot_offset, RawAccess, RawSample, SlotHeader, SpillHeader,
    COUNTER_ALL_LANES, COUNTER_OFFSET, COUNTER_PAGES, DECODE_ENTRIES, DECODE_OFFSET,
    EXEC_PATH_BYTES, FILE_BYTES, FILLING, FREE, MAGIC, MAX_SLOTS, SLOT_ACCESSES_AT,
    SLOT_SAMPLES_AT,
};

use crate::sys::{qemu_plugin_mem_is_store, qemu_plugin_mem_size_shift};

/// Start of the mapping (null until [`init`]).
static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// Free slot indices; slots past the header's count were never used.
static FREE_SLOTS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Queue positions handed out.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// A slot being filled by one thread.
pub struct Slot {
    pub index: u32,
    pub header: &'static SlotHeader,
    pub samples: *mut RawSample,
    pub accesses: *mut RawAccess,
}

fn header() -> &'static SpillHeader {
    // SAFETY: BASE points at a mapping of FILE_BYTES that lives until the process exits, and
    // the spill header is its first bytes (only used after init).
    unsafe { &*BASE.load(Ordering::Acquire).cast::<SpillHeader>() }
}

/// Maps the spill file (mgbench sizes it to `FILE_BYTES`; else private memory) and writes
/// its header and decoding table.
pub fn init(spill: Option<&str>) -> Result<(), String> {
    let file = spill.and_then(|path| {
        let f = OpenOptions::new().read(true).write(true).open(path);
        match f {
            Ok(f) if f.metadata().is_ok_and(|m| m.len() >= FILE_BYTES as u64) => Some(f),
            Ok(_) => {
                crate::sys::outs(&format!(
                    "spill file {path} is smaller than {FILE_BYTES} bytes: accesses recorded just before the program is killed may be lost"
                ));
                None
            }
            Err(e) => {
                crate::sys::outs(&format!(
                    "cannot open spill file {path} ({e}): accesses recorded just before the program is killed may be lost"
                ));
                None
            }
        }
    });
    let fd = file.as_ref().map_or(-1, |f| f.as_raw_fd());
    let base = crate::sys::map_slots(fd, FILE_BYTES)
        .map_err(|e| format!("cannot map {FILE_BYTES} bytes for buffers: {e}"))?;
    // The mapping keeps the file alive. mgbench passes it as an inherited descriptor
    // (`/proc/self/fd/N`): closed too, so that the guest does not find it among its own.
    drop(file);
    if let Some(n) = spill
        .and_then(|p| p.strip_prefix("/proc/self/fd/"))
        .and_then(|n| n.parse::<std::ffi::c_int>().ok())
    {
        crate::sys::close_fd(n);
    }
    // SAFETY: base..base+FILE_BYTES is a fresh read-write mapping; the decoding table lies
    // inside it, and nothing else uses it yet.
    let table = unsafe { std::slice::from_raw_parts_mut(base.add(DECODE_OFFSET), DECODE_ENTRIES) };
    for (info, entry) in table.iter_mut().enumerate() {
        // SAFETY: pure decoding of a meminfo value (bit operations in QEMU).
        let (shift, store) = unsafe {
            (
                qemu_plugin_mem_size_shift(info as u32),
                qemu_plugin_mem_is_store(info as u32),
            )
        };
        *entry = encode_info(shift, store);
    }
    // SAFETY: as above; the header is the mapping's first bytes. The magic goes last: mgbench
    // reads nothing from a file without it.
    unsafe { (*base.cast::<SpillHeader>()).magic = MAGIC };
    BASE.store(base, Ordering::Release);
    // The inline counters on the file's counter pages, their bases in the header: after a
    // death mgbench adds what they counted since they were last given to a thread.
    // SAFETY: the counter pages lie inside the mapping, which lives until the process exits.
    unsafe {
        crate::switch::place_counters(base.add(COUNTER_OFFSET).cast(), &header().counter_bases)
    };
    crate::sys::on_fork_child(forget_in_child);
    Ok(())
}

/// Adds an exiting thread's skips since its last sample to the header's count.
pub fn retire_tail(skipped: u64) {
    if !BASE.load(Ordering::Acquire).is_null() {
        header().retired_tail.fetch_add(skipped, Ordering::AcqRel);
    }
}

/// Notes an `execve` of `path` in the header (the last one wins: a shell's failed tries
/// along PATH come before the one that replaces the process).
pub fn note_exec(path: &[u8]) {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    let n = path.len().min(EXEC_PATH_BYTES);
    // SAFETY: exec_path is EXEC_PATH_BYTES inside the header; only the thread calling
    // execve writes it, and mgbench reads it after the process is gone.
    unsafe {
        let at = base.add(std::mem::offset_of!(SpillHeader, exec_path));
        std::ptr::copy_nonoverlapping(path.as_ptr(), at, n);
    }
    header().exec_len.store(n as u32, Ordering::Release);
    header().execs.fetch_add(1, Ordering::AcqRel);
}

/// In a forked child: the parent's slots must not be written by the child's copy of a thread,
/// so the child gets private zeroes in their place (it records nothing; see `Vcpu::flush`).
extern "C" fn forget_in_child() {
    let base = BASE.load(Ordering::Acquire);
    if !base.is_null() {
        // The counters go on in the child's copy from the values they had (their bases are
        // the parent's).
        let lane = |c: usize, l: usize| counter_lane(COUNTER_OFFSET + c * 4096, l);
        let mut lanes = [[0u64; COUNTER_ALL_LANES]; COUNTER_PAGES];
        // SAFETY: the lanes are aligned u64s on the counter pages inside the mapping; the
        // remap replaces our own mapping with fresh private memory of the same size.
        unsafe {
            for (c, counter) in lanes.iter_mut().enumerate() {
                for (l, v) in counter.iter_mut().enumerate() {
                    *v = std::ptr::read_volatile(base.add(lane(c, l)).cast::<u64>());
                }
            }
            crate::sys::remap_private(base, FILE_BYTES);
            for (c, counter) in lanes.iter().enumerate() {
                for (l, v) in counter.iter().enumerate() {
                    std::ptr::write_volatile(base.add(lane(c, l)).cast::<u64>(), *v);
                }
            }
        }
    }
}

/// The decoding table, by meminfo (an encoder looks it up once per chunk).
#[inline]
pub fn decode_table() -> &'static [u8] {
    let base = BASE.load(Ordering::Relaxed);
    if base.is_null() {
        return &[];
    }
    // SAFETY: the table lies inside the mapping, which lives until process exit; it was
    // filled in init and is only read afterwards.
    unsafe { std::slice::from_raw_parts(base.add(DECODE_OFFSET), DECODE_ENTRIES) }
}

fn slot_at(index: u32) -> Slot {
    // SAFETY: index < MAX_SLOTS, so the slot lies inside the mapping; its header, samples and
    // accesses are disjoint parts of it.
    unsafe {
        let s = BASE
            .load(Ordering::Acquire)
            .add(slot_offset(index as usize));
        Slot {
            index,
            header: &*s.cast::<SlotHeader>(),
            samples: s.add(SLOT_SAMPLES_AT).cast(),
            accesses: s.add(SLOT_ACCESSES_AT).cast(),
        }
    }
}

/// An empty slot for `thread`, or `None` when all [`MAX_SLOTS`] are in use.
pub fn take(thread: u32) -> Option<Slot> {
    let index = {
        let mut free = FREE_SLOTS.lock().ok()?;
        match free.pop() {
            Some(i) => i,
            None => {
                let used = header().slots.load(Ordering::Acquire);
                if used as usize >= MAX_SLOTS {
                    return None;
                }
                header().slots.store(used + 1, Ordering::Release);
                used
            }
        }
    };
    let s = slot_at(index);
    let h = s.header;
    h.len.store(0, Ordering::Release);
    h.samples.store(0, Ordering::Release);
    h.open.store(0, Ordering::Release);
    h.tail_skipped.store(0, Ordering::Release);
    h.thread.store(thread, Ordering::Release);
    h.seq.store(u64::MAX, Ordering::Release);
    h.state.store(FILLING, Ordering::Release);
    Some(s)
}

/// Slots queued so far (the next queue position).
pub fn queued() -> u64 {
    SEQ.load(Ordering::Acquire)
}

/// Marks a slot queued for the writer (its queue position is the next one).
pub fn queue(slot: &Slot) {
    slot.header
        .seq
        .store(SEQ.fetch_add(1, Ordering::AcqRel), Ordering::Release);
    slot.header
        .state
        .store(mgbench_capture::spill::QUEUED, Ordering::Release);
}

/// The writer's view of a queued slot: its header, samples and accesses.
pub fn contents(
    index: u32,
) -> (
    &'static SlotHeader,
    &'static [RawSample],
    &'static [RawAccess],
) {
    let s = slot_at(index);
    let h = s.header;
    let n = (h.len.load(Ordering::Acquire) as usize).min(mgbench_capture::spill::SLOT_ACCESSES);
    let k = (h.samples.load(Ordering::Acquire) as usize).min(mgbench_capture::spill::SLOT_SAMPLES);
    // SAFETY: a queued slot is written by nobody until released; n and k are within its
    // arrays, and the mapping lives until process exit.
    unsafe {
        (
            h,
            std::slice::from_raw_parts(s.samples, k),
            std::slice::from_raw_parts(s.accesses, n),
        )
    }
}

/// Returns a slot to the free list.
pub fn release(index: u32) {
    slot_at(index).header.state.store(FREE, Ordering::Release);
    if let Ok(mut free) = FREE_SLOTS.lock() {
        free.push(index);
    }
}

/// The spill header's record of the trace length after the last complete frame.
pub fn set_committed(len: u64) {
    header().committed.store(len, Ordering::Release);
}
