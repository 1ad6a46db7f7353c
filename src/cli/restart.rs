//! Where `octet train` starts when `octet launch --max-restarts` starts it again: from the
//! checkpoint its run directory got after the last finished epoch, so a failure costs at most
//! the epoch in progress.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use octet_trainer::checkpoint::LAST_FILE;
use octet_trainer::dist::{launched_at, restarts};

/// What the launcher says of this start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// Restarts so far (0: the first start).
    pub restart: usize,
    /// Restarts the launcher allows.
    pub allowed: usize,
    /// When the launcher started the job; `None` under another launcher (torchrun).
    pub launched_at: Option<SystemTime>,
}

/// Which checkpoint a start resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// What the flags say (`--resume`, `--init` or a fresh model).
    AsGiven,
    /// The run directory's checkpoint, written by this job before the failure.
    Resume(PathBuf),
    /// The run directory's checkpoint is older than the job: another run's, not resumed.
    StaleIgnored(PathBuf),
}

impl Attempt {
    /// From the launcher's variables; the first start of no launcher outside one.
    pub fn from_env() -> anyhow::Result<Attempt> {
        let get = |k: &str| std::env::var(k).ok();
        let (restart, allowed) = restarts(get)?;
        Ok(Attempt {
            restart,
            allowed,
            launched_at: launched_at(get)?,
        })
    }

    /// A restart resumes from `out`'s last checkpoint when this job wrote it: modified since
    /// the launcher started (under torchrun, which gives no start time: whenever there is
    /// one). A first start, or a restart before the first epoch ended, starts as given.
    pub fn start(&self, out: &Path) -> Start {
        let last = out.join(LAST_FILE);
        if self.restart == 0 || !last.is_file() {
            return Start::AsGiven;
        }
        let modified = std::fs::metadata(&last).and_then(|m| m.modified()).ok();
        match (self.launched_at, modified) {
            (None, _) => Start::Resume(last),
            (Some(t), Some(m)) if m >= t => Start::Resume(last),
            _ => Start::StaleIgnored(last),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn attempt(restart: usize, launched_at: Option<SystemTime>) -> Attempt {
        Attempt {
            restart,
            allowed: 2,
            launched_at,
        }
    }

    #[test]
    fn a_restart_resumes_from_this_jobs_last_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        let before = SystemTime::now() - Duration::from_secs(5);
        assert_eq!(attempt(1, Some(before)).start(d.path()), Start::AsGiven);
        let last = d.path().join(LAST_FILE);
        std::fs::write(&last, b"x").unwrap();
        assert_eq!(
            attempt(1, Some(before)).start(d.path()),
            Start::Resume(last.clone())
        );
        // torchrun gives no start time: the checkpoint is taken as the job's.
        assert_eq!(
            attempt(1, None).start(d.path()),
            Start::Resume(last.clone())
        );
        // The first start never resumes on its own.
        assert_eq!(attempt(0, Some(before)).start(d.path()), Start::AsGiven);
    }

    #[test]
    fn a_checkpoint_older_than_the_job_is_not_resumed() {
        let d = tempfile::tempdir().unwrap();
        let last = d.path().join(LAST_FILE);
        std::fs::write(&last, b"x").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        assert_eq!(
            attempt(1, Some(later)).start(d.path()),
            Start::StaleIgnored(last)
        );
    }
}
