//! Replay across MPI ranks: weak and strong scaling, barriers, per-rank figures and the two
//! aggregates, behind a small [`Team`] interface so the logic runs (and is tested) without
//! MPI; `mpi_team.rs` (feature `mpi`) implements it over a real MPI communicator.
//!
//! - **Weak**: every rank runs the whole configuration.
//! - **Strong**: the configuration's work is split into contiguous, near-equal shares: blocks
//!   of the count loop when `count >= ranks` (each rank runs `count_r` iterations, as threads
//!   split it), else slices of the pattern (the inner pattern of multi-kernels, both sides of
//!   gs) run for every iteration. A rank whose share is empty only joins the barriers.
//! - Every warm-up and timed run starts with a barrier. The record's time for run k is the
//!   slowest rank's; its `bandwidth_mbs` is all ranks' bytes over the best such time (the
//!   honest figure); `mpi.sum_of_rank_bandwidths_mbs` is Spatter's (each rank's own best).
//! - Errors are agreed on collectively before anything waits on them: a rank that fails to
//!   plan, allocate or start sends its message to rank 0, every rank returns, and the job ends
//!   with the failing rank's message instead of hanging in a collective.

use crate::config::{ApexKernel, Kernel, RunConfig};
use crate::measure::{bandwidth_mbs, Summary};
use crate::pool::{static_range, Placement, Pool};
use crate::record::{Host, MpiFigures, RankFigures, ReplayRecord, Scaling, Share, StreamRecord};
use crate::results::ResultsWriter;
use crate::{
    allocate_buffers, build_record, plan, plan_within, stream, stream_on, sys, time_config, Event,
    Planned, ReplayConfig, ReplayError,
};

/// The collective operations replay needs from a group of ranks.
pub trait Team {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// This rank's index among the ranks on its node, and how many share the node.
    fn local(&self) -> (usize, usize);
    fn barrier(&self);
    /// True on every rank if `flag` is true on any.
    fn any(&self, flag: bool) -> bool;
    /// Element-wise maximum over ranks, on every rank.
    fn max_f64(&self, values: &[f64]) -> Vec<f64>;
    /// Rank 0 receives every rank's `values` (same length everywhere), in rank order; other
    /// ranks receive nothing.
    fn gather_f64(&self, values: &[f64]) -> Vec<f64>;
    fn gather_u64(&self, values: &[u64]) -> Vec<u64>;
    /// Rank 0 receives every rank's text (cut to [`TEXT_BYTES`]).
    fn gather_text(&self, text: &str) -> Vec<String>;
    /// Who started the ranks, for the records.
    fn launcher(&self) -> String;
}

/// Longest text a rank sends to rank 0 (error messages, host names).
pub const TEXT_BYTES: usize = 2048;

/// A team of one: replay's MPI path on a single process, for tests and `--mpi 1` runs.
pub struct Solo;

impl Team for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn local(&self) -> (usize, usize) {
        (0, 1)
    }
    fn barrier(&self) {}
    fn any(&self, flag: bool) -> bool {
        flag
    }
    fn max_f64(&self, values: &[f64]) -> Vec<f64> {
        values.to_vec()
    }
    fn gather_f64(&self, values: &[f64]) -> Vec<f64> {
        values.to_vec()
    }
    fn gather_u64(&self, values: &[u64]) -> Vec<u64> {
        values.to_vec()
    }
    fn gather_text(&self, text: &str) -> Vec<String> {
        vec![cut(text).to_string()]
    }
    fn launcher(&self) -> String {
        "none".to_string()
    }
}

/// `text` cut to at most TEXT_BYTES bytes at a character boundary.
pub fn cut(text: &str) -> &str {
    let mut end = text.len().min(TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The rank's part of a configuration: its config (None when its share is empty) and the share.
pub fn share(
    c: &RunConfig,
    scaling: Scaling,
    rank: usize,
    ranks: usize,
) -> (Option<RunConfig>, Share) {
    let len = c.kernel.pattern_len();
    let full = Share {
        iterations: [0, c.count],
        indices: [0, len],
    };
    if scaling == Scaling::Weak || ranks <= 1 {
        return (Some(c.clone()), full);
    }
    let mut s = full;
    let mut out = c.clone();
    if c.count >= ranks || matches!(c.kernel, Kernel::Apex(_)) {
        let r = static_range(c.count, ranks, rank);
        s.iterations = [r.start, r.end];
        out.count = r.len();
        if let Kernel::Apex(a) = &c.kernel {
            out.kernel = Kernel::Apex(ApexKernel {
                starts: a.starts[r].to_vec(),
                ..a.clone()
            });
        }
    } else {
        let r = static_range(len, ranks, rank);
        s.indices = [r.start, r.end];
        out.kernel = c.kernel.slice_indices(r);
    }
    if s.elements() == 0 {
        return (None, s);
    }
    (Some(out), s)
}

/// One configuration as a rank sees it.
struct RankPlan {
    /// The whole configuration (describes the record).
    full: Planned,
    /// This rank's part of it.
    mine: Option<Planned>,
    share: Share,
}

/// Makes every rank agree on `result`: if any rank failed, every rank returns an error, rank 0
/// with every failing rank's message.
fn agree<T>(team: &dyn Team, result: Result<T, ReplayError>) -> Result<T, ReplayError> {
    if !team.any(result.is_err()) {
        return result;
    }
    let message = match &result {
        Err(e) => e.to_string(),
        Ok(_) => String::new(),
    };
    let messages = team.gather_text(&message);
    if team.rank() == 0 {
        Err(ReplayError::Ranks(
            messages
                .into_iter()
                .enumerate()
                .filter(|(_, m)| !m.is_empty())
                .collect(),
        ))
    } else {
        Err(ReplayError::FailedElsewhere)
    }
}

fn plan_rank(
    config: &ReplayConfig,
    scaling: Scaling,
    team: &dyn Team,
) -> Result<Vec<RankPlan>, ReplayError> {
    if let Some(rank) = injected_failure() {
        if rank == team.rank() {
            return Err(ReplayError::Injected(rank));
        }
    }
    let (_, local_size) = team.local();
    // Ranks on one node share its memory: each checks against its part.
    let available = sys::available_memory_bytes().map(|m| m / local_size.max(1) as u64);
    let full = if team.size() > 1 {
        plan_within(config, available)?
    } else {
        plan(config)?
    };
    full.into_iter()
        .map(|p| {
            let (mine, share) = share(&p.config, scaling, team.rank(), team.size());
            let mine = match mine {
                None => None,
                Some(c) => {
                    let fail = |problem| ReplayError::Plan {
                        origin: c.origin.clone(),
                        name: c.name.clone(),
                        problem,
                    };
                    let footprint = crate::plan::footprint(&c).map_err(fail)?;
                    Some(Planned {
                        racy: p.racy && crate::plan::scatter_may_race(&c, config.threads),
                        config: c,
                        footprint,
                    })
                }
            };
            Ok(RankPlan {
                full: p,
                mine,
                share,
            })
        })
        .collect()
}

/// The test hook `MGBENCH_FAIL_RANK=R`: rank R fails while planning, so the abort path can be
/// exercised with a real launcher.
fn injected_failure() -> Option<usize> {
    std::env::var("MGBENCH_FAIL_RANK").ok()?.trim().parse().ok()
}

/// Runs every configuration on every rank of `team`; rank 0 reports events, writes results
/// and returns the records (other ranks return an empty list).
pub fn replay_team(
    config: &ReplayConfig,
    scaling: Scaling,
    team: &dyn Team,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    let root = team.rank() == 0;
    let plans = agree(team, plan_rank(config, scaling, team))?;
    if root {
        on_event(Event::Planned {
            configs: plans.len(),
        });
    }
    let writer = match (&config.out_dir, root) {
        (Some(dir), true) => Some(ResultsWriter::create(dir, "replay")),
        _ => None,
    }
    .transpose();
    let mut writer = agree(team, writer.map_err(ReplayError::from))?;
    if let Some(w) = &writer {
        on_event(Event::ResultsFiles {
            json: w.json_path(),
            csv: w.csv_path(),
        });
    }
    let (local_rank, local_size) = team.local();
    let cpus = sys::allowed_cpus().len();
    // Pin this rank's threads after those of the ranks before it on the node, unless the
    // launcher already confined each rank to its own CPUs.
    let placement = match config.placement {
        Placement::Unpinned => Placement::Unpinned,
        _ if cpus >= local_size * config.threads => {
            Placement::PinnedFrom(local_rank * config.threads)
        }
        _ => Placement::Pinned,
    };
    let oversubscribed = local_size * config.threads > cpus;
    let pool = agree(
        team,
        Pool::new(config.threads, placement).map_err(ReplayError::from),
    )?;
    let stream = match config.stream_elements {
        Some(size) => {
            team.barrier();
            let s = agree(team, stream_on(&pool, size, stream::DEFAULT_NTIMES))?;
            let rates = team.gather_f64(&[s.copy_mbs, s.scale_mbs, s.add_mbs, s.triad_mbs]);
            if root {
                let total = |k: usize| rates.iter().skip(k).step_by(4).sum::<f64>();
                let mut s = s;
                if team.size() > 1 {
                    s.copy_mbs = total(0);
                    s.scale_mbs = total(1);
                    s.add_mbs = total(2);
                    s.triad_mbs = total(3);
                    for (i, k) in s.kernels.iter_mut().enumerate().take(4) {
                        k.bandwidth_mbs = total(i);
                    }
                    s.ranks = team.size();
                    s.notes.push(format!(
                        "STREAM ran on all {} ranks at once: the rates are their sum; the times are rank 0's",
                        team.size()
                    ));
                }
                if let Some(w) = &writer {
                    w.write_stream(&s)?;
                }
                on_event(Event::Stream(&s));
                Some(s)
            } else {
                None
            }
        }
        None => None,
    };
    let host = Host::detect();
    let mode = config.write_mode();
    let mut records = Vec::new();
    for rp in &plans {
        let nruns = rp.full.config.nruns;
        // Every rank learns of a failed allocation before anyone waits in a barrier.
        let buffers = rp
            .mine
            .as_ref()
            .map(|m| allocate_buffers(&pool, m))
            .transpose();
        let buffers = agree(team, buffers)?;
        let times = match (&rp.mine, buffers) {
            (Some(mine), Some(mut b)) => {
                time_config(&pool, mine, config, mode, &mut b, &mut || team.barrier())
            }
            _ => {
                for _ in 0..config.warmup + nruns {
                    team.barrier();
                }
                vec![0.0; nruns]
            }
        };
        let slowest = team.max_f64(&times);
        let all_times = team.gather_f64(&times);
        let bytes = rp.mine.as_ref().map_or(0, |m| m.config.bytes());
        let s = rp.share;
        let figures = team.gather_u64(&[
            bytes,
            s.iterations[0] as u64,
            s.iterations[1] as u64,
            s.indices[0] as u64,
            s.indices[1] as u64,
        ]);
        let hosts = team.gather_text(&host.hostname);
        if !root {
            continue;
        }
        let per_rank: Vec<RankFigures> = (0..team.size())
            .map(|r| {
                let f = &figures[5 * r..5 * r + 5];
                let run_times_s = all_times[nruns * r..nruns * (r + 1)].to_vec();
                let min = Summary::of(&run_times_s).map_or(f64::NAN, |s| s.min);
                RankFigures {
                    rank: r,
                    host: hosts.get(r).cloned().unwrap_or_default(),
                    share: Share {
                        iterations: [f[1] as usize, f[2] as usize],
                        indices: [f[3] as usize, f[4] as usize],
                    },
                    bytes: f[0],
                    min_time_s: min,
                    bandwidth_mbs: if f[0] == 0 {
                        0.0
                    } else {
                        bandwidth_mbs(f[0], min)
                    },
                    run_times_s,
                }
            })
            .collect();
        records.push(aggregate_record(
            &pool,
            rp,
            config,
            scaling,
            team,
            slowest,
            per_rank,
            stream.as_ref(),
            &host,
            oversubscribed,
        ));
        let record = records.last().expect("just pushed");
        on_event(Event::Record(record));
        if let Some(w) = &mut writer {
            w.push(record.clone())?;
        }
    }
    Ok(records)
}

/// Rank 0's record for the job: all ranks' bytes over the slowest rank's time per run.
#[allow(clippy::too_many_arguments)]
fn aggregate_record(
    pool: &Pool,
    rp: &RankPlan,
    config: &ReplayConfig,
    scaling: Scaling,
    team: &dyn Team,
    slowest: Vec<f64>,
    per_rank: Vec<RankFigures>,
    stream: Option<&StreamRecord>,
    host: &Host,
    oversubscribed: bool,
) -> ReplayRecord {
    let mut r = build_record(pool, &rp.full, config, slowest, stream, host);
    let total: u64 = per_rank.iter().map(|p| p.bytes).sum();
    r.bytes = total;
    r.accesses = total / 8;
    r.bandwidth_mbs = bandwidth_mbs(total, r.min_time_s);
    r.accesses_per_s = r.accesses as f64 / r.min_time_s;
    r.ns_per_access = r.min_time_s * 1e9 / r.accesses as f64;
    r.pct_of_stream = r.stream_copy_mbs.map(|s| 100.0 * r.bandwidth_mbs / s);
    r.ranks = team.size();
    if oversubscribed {
        r.notes.push(format!(
            "{} ranks x {} threads on a node with {} CPUs: oversubscribed, bandwidth is not representative",
            team.local().1,
            config.threads,
            sys::allowed_cpus().len()
        ));
    }
    // The slowest rank of the best run.
    let best = r
        .run_times_s
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(k, _)| k);
    let slowest_rank = per_rank
        .iter()
        .max_by(|a, b| a.run_times_s[best].total_cmp(&b.run_times_s[best]))
        .map_or(0, |p| p.rank);
    r.mpi = Some(MpiFigures {
        scaling,
        launcher: team.launcher(),
        sum_of_rank_bandwidths_mbs: per_rank.iter().map(|p| p.bandwidth_mbs).sum(),
        slowest_rank,
        per_rank,
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strong_shares_cover_the_work_once() {
        let gather = RunConfig::test(
            Kernel::Gather {
                pattern: (0..10).collect(),
                delta: 8,
            },
            7,
        );
        for ranks in 1..=9 {
            let mut covered = vec![0u32; 7 * 10];
            for rank in 0..ranks {
                let (c, s) = share(&gather, Scaling::Strong, rank, ranks);
                if let Some(c) = &c {
                    assert_eq!(c.count * c.kernel.pattern_len(), s.elements());
                }
                for i in s.iterations[0]..s.iterations[1] {
                    for j in s.indices[0]..s.indices[1] {
                        covered[i * 10 + j] += 1;
                    }
                }
            }
            assert!(
                covered.iter().all(|&n| n == 1),
                "ranks {ranks}: {covered:?}"
            );
        }
        // Count split when count >= ranks: contiguous iteration blocks.
        let (c, s) = share(&gather, Scaling::Strong, 1, 2);
        assert_eq!(
            (s.iterations, s.indices, c.unwrap().count),
            ([4, 7], [0, 10], 3)
        );
        // Pattern split otherwise: the pattern's slice, every iteration.
        let (c, s) = share(&gather, Scaling::Strong, 3, 8);
        assert_eq!((s.iterations, s.indices), ([0, 7], [5, 6]));
        assert_eq!(c.unwrap().kernel.effective_pattern().0, vec![5]);
        // Weak: everything, on every rank.
        let (c, s) = share(&gather, Scaling::Weak, 3, 8);
        assert_eq!(
            (s.iterations, s.indices, c.unwrap().count),
            ([0, 7], [0, 10], 7)
        );
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn without_the_feature_ranks_cannot_start() {
        let config = ReplayConfig::new(vec![]);
        let e = crate::run_rank(&config, Scaling::Weak, "mpirun", Some(2), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--features mpi") && e.contains("scripts/setup.sh"),
            "{e}"
        );
    }

    #[test]
    fn empty_shares_have_no_config() {
        let tiny = RunConfig::test(
            Kernel::Scatter {
                pattern: vec![0, 1],
                delta: 2,
            },
            1,
        );
        let (c, s) = share(&tiny, Scaling::Strong, 3, 4);
        assert!(c.is_none());
        assert_eq!(s.elements(), 0);
    }

    #[test]
    fn solo_team_runs_and_aggregates() {
        use crate::{InlineSpec, Input};
        let mut config = ReplayConfig::new(vec![Input::Inline(Box::new(InlineSpec {
            pattern: Some("UNIFORM:8:1".into()),
            count: Some(1000),
            ..InlineSpec::default()
        }))]);
        config.threads = 1;
        config.runs = Some(3);
        config.stream_elements = None;
        let recs = replay_team(&config, Scaling::Strong, &Solo, &mut |_| {}).unwrap();
        let r = &recs[0];
        let m = r.mpi.as_ref().unwrap();
        assert_eq!(r.ranks, 1);
        assert_eq!(r.bytes, 8 * 8 * 1000);
        assert_eq!(m.per_rank.len(), 1);
        assert_eq!(m.per_rank[0].bytes, r.bytes);
        assert_eq!(m.per_rank[0].run_times_s, r.run_times_s);
        assert!((m.sum_of_rank_bandwidths_mbs - r.bandwidth_mbs).abs() < 1e-6 * r.bandwidth_mbs);
    }
}
