//! Per-step timelines of a training epoch as CSV: when each rank's host queued every step
//! and every all-reduce, when its device ran them, and when compute waited for an
//! all-reduce's result (the part backward did not hide), all on one host clock, so a slow
//! rank, an idle GPU, a host that falls behind or exposed communication shows up as gaps (`octet train --timeline`,
//! summarised by `bench/timeline.py`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::atomic::write_atomic;
use crate::dist::collective::CommMarks;
use crate::step_clock::StepMarks;
use crate::Result;

/// Writes `steps_rank{r}_epoch{e}.csv` and `comm_rank{r}_epoch{e}.csv` into `dir`; returns
/// the two paths. Times are µs since the Unix epoch.
pub fn write(
    dir: &Path,
    rank: usize,
    epoch: usize,
    steps: &[StepMarks],
    comm: &[CommMarks],
) -> Result<[PathBuf; 2]> {
    let mut s = String::from("step,host_start,host_h2d,host_end,dev_start,dev_h2d,dev_end\n");
    for (i, m) in steps.iter().enumerate() {
        let _ = writeln!(
            s,
            "{i},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1}",
            m.host_start, m.host_h2d, m.host_end, m.dev_start, m.dev_h2d, m.dev_end
        );
    }
    let mut c =
        String::from("call,host,dev_arrived,dev_start,dev_end,exposed_start,exposed_end,bytes\n");
    for (i, m) in comm.iter().enumerate() {
        let _ = writeln!(
            c,
            "{i},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{}",
            m.host, m.dev_arrived, m.dev_start, m.dev_end, m.exposed_start, m.exposed_end, m.bytes
        );
    }
    let steps_path = dir.join(format!("steps_rank{rank}_epoch{epoch}.csv"));
    let comm_path = dir.join(format!("comm_rank{rank}_epoch{epoch}.csv"));
    write_atomic(&steps_path, s.as_bytes())?;
    write_atomic(&comm_path, c.as_bytes())?;
    Ok([steps_path, comm_path])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_one_line_per_step_and_call() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("octet-timeline-{}", std::process::id()));
        let m = StepMarks {
            host_start: 1.0,
            host_h2d: 2.0,
            host_end: 3.0,
            dev_start: 4.0,
            dev_h2d: 5.0,
            dev_end: 6.5,
        };
        let c = CommMarks {
            host: 2.5,
            dev_arrived: 5.5,
            dev_start: 6.0,
            dev_end: 6.3,
            exposed_start: 6.1,
            exposed_end: 6.3,
            bytes: 4096,
        };
        let [s, k] = write(&dir, 1, 2, &[m, m], &[c])?;
        assert!(s.ends_with("steps_rank1_epoch2.csv"));
        let steps = std::fs::read_to_string(&s).unwrap();
        assert_eq!(steps.lines().count(), 3);
        assert_eq!(steps.lines().nth(2), Some("1,1.0,2.0,3.0,4.0,5.0,6.5"));
        let comm = std::fs::read_to_string(&k).unwrap();
        assert_eq!(comm.lines().nth(1), Some("0,2.5,5.5,6.0,6.3,6.1,6.3,4096"));
        std::fs::remove_dir_all(&dir).ok();
        Ok(())
    }
}
