//! Starting mgbench as an MPI job: recognising a process that a launcher (OpenMPI's mpirun,
//! Slurm's srun, a PMI launcher) started, and building the launcher command that re-runs
//! mgbench itself as N ranks.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A supported launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Mpirun,
    Srun,
}

impl Launcher {
    pub fn program(self) -> &'static str {
        match self {
            Launcher::Mpirun => "mpirun",
            Launcher::Srun => "srun",
        }
    }
}

/// What the environment says about the rank this process is, when a launcher started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    pub rank: usize,
    pub size: usize,
    /// "mpirun", "srun" or "pmi".
    pub launcher: &'static str,
}

/// The rank this process is, if an MPI launcher started it (checked in the order OpenMPI,
/// Slurm, PMI/PMIx).
pub fn rank_env() -> Option<RankEnv> {
    rank_env_from(|k| std::env::var(k).ok())
}

/// [`rank_env`] over any variable lookup (for tests).
pub fn rank_env_from(get: impl Fn(&str) -> Option<String>) -> Option<RankEnv> {
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
    for (rank, size, launcher) in [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"),
        ("SLURM_PROCID", "SLURM_NTASKS", "srun"),
        ("PMI_RANK", "PMI_SIZE", "pmi"),
        ("PMIX_RANK", "PMIX_SIZE", "pmi"),
    ] {
        if let (Some(rank), Some(size)) = (num(rank), num(size)) {
            return Some(RankEnv {
                rank,
                size,
                launcher,
            });
        }
    }
    None
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("--mpi needs {program}, which is not on PATH: install OpenMPI (scripts/setup.sh, or `apt-get install openmpi-bin`) or choose another --launcher")]
    NotFound { program: &'static str },
    #[error("--mpi 0: give at least one rank")]
    ZeroRanks,
}

/// Finds `program` on PATH.
pub fn find(program: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub launcher: Launcher,
    pub ranks: usize,
    /// Threads per rank (for the oversubscription check).
    pub threads: usize,
    /// Extra launcher arguments, passed before the program.
    pub extra: Vec<String>,
    /// mgbench's own executable and the arguments each rank gets.
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

/// The launcher command, and a warning when the ranks' threads outnumber this machine's CPUs.
/// With mpirun: `--oversubscribe` then, `--bind-to none` (mgbench pins each rank's threads
/// itself, after the ranks before it on the node) unless the user gave a binding, and the two
/// variables OpenMPI wants before it runs as root.
pub fn command(
    plan: &LaunchPlan,
    cpus: usize,
    root: bool,
) -> Result<(Command, Option<String>), LaunchError> {
    if plan.ranks == 0 {
        return Err(LaunchError::ZeroRanks);
    }
    let program = plan.launcher.program();
    let path = find(program).ok_or(LaunchError::NotFound { program })?;
    Ok(build(plan, &path, cpus, root))
}

fn build(plan: &LaunchPlan, path: &Path, cpus: usize, root: bool) -> (Command, Option<String>) {
    let mut cmd = Command::new(path);
    let over = plan.ranks * plan.threads > cpus;
    let warning = over.then(|| {
        format!(
            "{} ranks x {} threads is more than the {cpus} CPUs here: oversubscribed, bandwidth will not be representative",
            plan.ranks, plan.threads
        )
    });
    match plan.launcher {
        Launcher::Mpirun => {
            cmd.arg("-np").arg(plan.ranks.to_string());
            if over {
                cmd.arg("--oversubscribe");
            }
            if !plan
                .extra
                .iter()
                .any(|a| a.starts_with("--bind-to") || a.starts_with("--map-by"))
            {
                cmd.args(["--bind-to", "none"]);
            }
            if root {
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1");
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            }
        }
        Launcher::Srun => {
            cmd.arg("-n").arg(plan.ranks.to_string());
        }
    }
    cmd.args(&plan.extra);
    cmd.arg(&plan.exe);
    cmd.args(&plan.args);
    (cmd, warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_recognised_from_the_launchers_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            rank_env_from(env(&[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "4")
            ])),
            Some(RankEnv {
                rank: 1,
                size: 4,
                launcher: "mpirun"
            })
        );
        assert_eq!(
            rank_env_from(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]))
                .unwrap()
                .launcher,
            "srun"
        );
        assert_eq!(rank_env_from(env(&[("SLURM_PROCID", "0")])), None);
        assert_eq!(rank_env_from(env(&[])), None);
    }

    #[test]
    fn mpirun_commands() {
        let plan = LaunchPlan {
            launcher: Launcher::Mpirun,
            ranks: 4,
            threads: 1,
            extra: vec!["--host".into(), "a,b".into()],
            exe: "/bin/mgbench".into(),
            args: vec!["replay".into(), "x.json".into()],
        };
        let (cmd, warn) = build(&plan, Path::new("/usr/bin/mpirun"), 2, true);
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-np",
                "4",
                "--oversubscribe",
                "--bind-to",
                "none",
                "--host",
                "a,b",
                "/bin/mgbench",
                "replay",
                "x.json"
            ]
        );
        assert!(warn.unwrap().contains("oversubscribed"));
        assert!(cmd.get_envs().any(|(k, _)| k == "OMPI_ALLOW_RUN_AS_ROOT"));
        // A user's binding wins; no oversubscription, no warning, no root variables.
        let plan = LaunchPlan {
            ranks: 2,
            extra: vec!["--bind-to".into(), "core".into()],
            ..plan
        };
        let (cmd, warn) = build(&plan, Path::new("/usr/bin/mpirun"), 2, false);
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-np",
                "2",
                "--bind-to",
                "core",
                "/bin/mgbench",
                "replay",
                "x.json"
            ]
        );
        assert!(warn.is_none());
        assert_eq!(cmd.get_envs().count(), 0);
    }
}
