//! The [`Team`] of a real MPI job (the `mpi` crate over the system's MPI library), and the entry
//! point a rank runs. Built only with the `mpi` feature.

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::record::{ReplayRecord, Scaling};
use crate::scaling::{cut, replay_team, Team, TEXT_BYTES};
use crate::{Event, ReplayConfig, ReplayError};

struct World {
    world: SimpleCommunicator,
    local: (usize, usize),
    launcher: String,
}

impl Team for World {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn local(&self) -> (usize, usize) {
        self.local
    }
    fn barrier(&self) {
        self.world.barrier();
    }
    fn any(&self, flag: bool) -> bool {
        let mut out = 0u8;
        self.world
            .all_reduce_into(&u8::from(flag), &mut out, SystemOperation::max());
        out != 0
    }
    fn max_f64(&self, values: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; values.len()];
        self.world
            .all_reduce_into(values, &mut out[..], SystemOperation::max());
        out
    }
    fn gather_f64(&self, values: &[f64]) -> Vec<f64> {
        let root = self.world.process_at_rank(0);
        if self.rank() == 0 {
            let mut out = vec![0.0; values.len() * self.size()];
            root.gather_into_root(values, &mut out[..]);
            out
        } else {
            root.gather_into(values);
            Vec::new()
        }
    }
    fn gather_u64(&self, values: &[u64]) -> Vec<u64> {
        let root = self.world.process_at_rank(0);
        if self.rank() == 0 {
            let mut out = vec![0u64; values.len() * self.size()];
            root.gather_into_root(values, &mut out[..]);
            out
        } else {
            root.gather_into(values);
            Vec::new()
        }
    }
    fn gather_text(&self, text: &str) -> Vec<String> {
        let mut buf = vec![0u8; TEXT_BYTES];
        let t = cut(text).as_bytes();
        buf[..t.len()].copy_from_slice(t);
        let root = self.world.process_at_rank(0);
        if self.rank() == 0 {
            let mut out = vec![0u8; TEXT_BYTES * self.size()];
            root.gather_into_root(&buf[..], &mut out[..]);
            out.chunks(TEXT_BYTES)
                .map(|c| {
                    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                    String::from_utf8_lossy(&c[..end]).into_owned()
                })
                .collect()
        } else {
            root.gather_into(&buf[..]);
            Vec::new()
        }
    }
    fn launcher(&self) -> String {
        self.launcher.clone()
    }
}

/// Runs this process as one rank of an MPI job started by `launcher`; rank 0 reports events
/// and returns the records. MPI is initialised here and finalised on return; an error only
/// this rank saw (after the collective checks) aborts the job so no rank waits forever.
pub fn run_rank(
    config: &ReplayConfig,
    scaling: Scaling,
    launcher: &str,
    expected_ranks: Option<usize>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Funneled).ok_or(ReplayError::MpiInit)?;
    let world = universe.world();
    let rank = world.rank();
    let node = world.split_shared(rank);
    let team = World {
        local: (node.rank() as usize, node.size() as usize),
        world,
        launcher: launcher.to_string(),
    };
    if let Some(n) = expected_ranks {
        if n != team.size() {
            let e = ReplayError::RankCount {
                asked: n,
                got: team.size(),
            };
            if rank == 0 {
                return Err(e);
            }
            return Err(ReplayError::FailedElsewhere);
        }
    }
    let result = replay_team(config, scaling, &team, on_event);
    match &result {
        Ok(_) | Err(ReplayError::Ranks(_)) | Err(ReplayError::FailedElsewhere) => result,
        Err(e) => {
            eprintln!("mgbench: rank {rank}: {e}");
            team.world.abort(1)
        }
    }
}
