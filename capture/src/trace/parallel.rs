//! Reading a trace with several decoding threads, frames delivered in order.
//!
//! Chunks are independent by design (fresh predictor, own zstd frame), so decompressing and
//! decoding them parallelises perfectly: a reader thread splits the file into frames, decoder
//! threads turn chunk payloads into [`Chunk`]s, and the caller consumes every frame in file
//! order. Chunk buffers travel back to the decoders for reuse, and at most `2 x threads`
//! frames are in flight between reading and consuming (the reader takes a permit per frame
//! and the caller returns it when done), so memory stays bounded on any trace length, also
//! when the caller is slower than the decoders.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use super::reader::{Damage, RawFrame, ReadError, TraceReader};
use super::{Chunk, ChunkDecoder, Frame};

enum Decoded {
    Frame(Frame),
    /// A chunk that failed to decode: the trace is damaged from this frame on.
    Bad(Damage),
}

/// Reads every frame of `reader` with `threads` decoders (1 = decode on the caller's thread)
/// and calls `f` for each in order. Returns the damage report of the trace, if any.
pub fn for_each_frame<R: Read + Send + 'static>(
    mut reader: TraceReader<R>,
    threads: usize,
    mut f: impl FnMut(&Frame),
) -> Result<Option<Damage>, ReadError> {
    if threads <= 1 {
        let mut chunk = Chunk::default();
        while let Some(frame) = reader.next_frame_into(&mut chunk)? {
            match frame {
                Frame::Chunk(_) => {
                    let frame = Frame::Chunk(std::mem::take(&mut chunk));
                    f(&frame);
                    if let Frame::Chunk(c) = frame {
                        chunk = c; // reuse its vectors for the next chunk
                    }
                }
                other => f(&other),
            }
        }
        return Ok(reader.damage().cloned());
    }
    let in_flight = 2 * threads;
    let (work_tx, work_rx) = sync_channel::<(u64, RawFrame)>(in_flight);
    // One permit per frame between reading and consuming.
    let (permit_tx, permit_rx) = sync_channel::<()>(in_flight);
    for _ in 0..in_flight {
        let _ = permit_tx.send(());
    }
    let work_rx = Arc::new(Mutex::new(work_rx));
    let (done_tx, done_rx) = channel::<(u64, Decoded)>();
    let (spare_tx, spare_rx) = channel::<Chunk>();
    let spare_rx = Arc::new(Mutex::new(spare_rx));
    let mut workers = Vec::new();
    for _ in 0..threads {
        let work = Arc::clone(&work_rx);
        let done = done_tx.clone();
        let spare = Arc::clone(&spare_rx);
        workers.push(std::thread::spawn(move || {
            decode_loop(&work, &done, &spare)
        }));
    }
    drop(done_tx);
    let reader_thread = std::thread::spawn(move || read_loop(reader, work_tx, permit_rx));
    let mut next = 0u64;
    let mut pending: BTreeMap<u64, Decoded> = BTreeMap::new();
    let mut damage = None;
    let mut stopped = false;
    for (seq, d) in done_rx.iter() {
        pending.insert(seq, d);
        while let Some(d) = pending.remove(&next) {
            next += 1;
            // Consumed (or about to be): the reader may read one more frame.
            let _ = permit_tx.try_send(());
            if stopped {
                continue;
            }
            match d {
                Decoded::Frame(Frame::Chunk(c)) => {
                    let frame = Frame::Chunk(c);
                    f(&frame);
                    if let Frame::Chunk(c) = frame {
                        let _ = spare_tx.send(c);
                    }
                }
                Decoded::Frame(frame) => f(&frame),
                Decoded::Bad(d) => {
                    damage = Some(d);
                    stopped = true;
                }
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    let (read_result, read_damage) = reader_thread.join().unwrap_or((Ok(()), None));
    read_result?;
    Ok(damage.or(read_damage))
}

fn read_loop<R: Read>(
    mut reader: TraceReader<R>,
    work: SyncSender<(u64, RawFrame)>,
    permits: Receiver<()>,
) -> (Result<(), ReadError>, Option<Damage>) {
    let mut seq = 0u64;
    loop {
        if permits.recv().is_err() {
            break;
        }
        match reader.next_raw_frame() {
            Ok(Some(raw)) => {
                if work.send((seq, raw)).is_err() {
                    break;
                }
                seq += 1;
            }
            Ok(None) => break,
            Err(e) => return (Err(e), None),
        }
    }
    (Ok(()), reader.damage().cloned())
}

fn decode_loop(
    work: &Mutex<Receiver<(u64, RawFrame)>>,
    done: &Sender<(u64, Decoded)>,
    spare: &Mutex<Receiver<Chunk>>,
) {
    let mut decoder = ChunkDecoder::new();
    loop {
        let job = match work.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((seq, raw)) = job else {
            return;
        };
        let decoded = match raw.decode(&mut decoder, || {
            spare
                .lock()
                .ok()
                .and_then(|rx| rx.try_recv().ok())
                .unwrap_or_default()
        }) {
            Ok(frame) => Decoded::Frame(frame),
            Err(d) => Decoded::Bad(d),
        };
        if done.send((seq, decoded)).is_err() {
            return;
        }
    }
}
