//! A job's resources in the user's and the engines' words: `plan --cpus`, `--mem` (Slurm's sizes,
//! MiB inside) and `--time` (Slurm's time formats, seconds inside) parsed at the edge, and the
//! figures written back as Slurm, Kubernetes and people read them.

use anyhow::Result;

use crate::foundation::error::bad_flag;

/// The most CPUs one job may ask for (no node has more).
pub const MAX_CPUS: u32 = 4096;
/// The most memory one job may ask for, MiB (64 TiB).
pub const MAX_MEM_MIB: u64 = 64 << 20;
/// The longest time limit, seconds (a year: a longer one is a typo).
pub const MAX_SECONDS: u64 = 365 * 86_400;

/// Parses `--cpus N`: a whole number from 1 to [`MAX_CPUS`].
pub fn parse_cpus(text: &str) -> Result<u32> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_CPUS).contains(n))
        .ok_or_else(|| {
            bad_flag(format!(
                "--cpus '{text}' is not a whole number of CPUs from 1 to {MAX_CPUS}"
            ))
        })
}

/// Parses `--mem SIZE` as Slurm writes it: a whole number with an optional unit K, M, G or T
/// (either case; none is M, as in Slurm), into MiB (a size in K rounded up).
pub fn parse_mem(text: &str) -> Result<u64> {
    let bad = |why: &str| bad_flag(format!("--mem '{text}': {why} (e.g. 4G, 4096M or 4096)"));
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&t[..at], c.to_ascii_uppercase()),
        _ => (t, 'M'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a whole number with an optional unit K, M, G or T"));
    }
    let number: u64 = digits.parse().map_err(|_| bad("too large"))?;
    let mib = match unit {
        'K' => Some(number.div_ceil(1024)),
        'M' => Some(number),
        'G' => number.checked_mul(1024),
        'T' => number.checked_mul(1 << 20),
        _ => return Err(bad("the unit is not K, M, G or T")),
    };
    match mib {
        Some(0) => Err(bad("no memory at all")),
        Some(m) if m <= MAX_MEM_MIB => Ok(m),
        _ => Err(bad("more than 64T")),
    }
}

/// Parses `--time` in any of Slurm's formats: `MINUTES`, `MINUTES:SECONDS`,
/// `HOURS:MINUTES:SECONDS`, `DAYS-HOURS`, `DAYS-HOURS:MINUTES`, `DAYS-HOURS:MINUTES:SECONDS`;
/// into seconds. Unlimited is refused: every recipe carries a limit.
pub fn parse_time(text: &str) -> Result<u64> {
    let bad = |why: &str| {
        bad_flag(format!(
            "--time '{text}': {why} (minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]], as Slurm's --time)"
        ))
    };
    let t = text.trim();
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (Some(d), rest),
        None => (None, t),
    };
    let number = |s: &str| -> Result<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("not a time"));
        }
        s.parse::<u64>().map_err(|_| bad("too long"))
    };
    let parts = clock.split(':').map(number).collect::<Result<Vec<u64>>>()?;
    // Without days, one number is minutes and two are minutes and seconds; with days, the first
    // after the dash is hours.
    let [h, m, s] = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => [0, *m, 0],
        (false, [m, s]) => [0, *m, *s],
        (true, [h]) => [*h, 0, 0],
        (true, [h, m]) => [*h, *m, 0],
        (_, [h, m, s]) => [*h, *m, *s],
        _ => return Err(bad("not a time")),
    };
    let d = days.map(number).transpose()?.unwrap_or(0);
    let seconds = d
        .checked_mul(86_400)
        .zip(h.checked_mul(3600))
        .zip(m.checked_mul(60))
        .and_then(|((d, h), m)| d.checked_add(h)?.checked_add(m)?.checked_add(s));
    match seconds {
        Some(0) => Err(bad("no time at all")),
        Some(total) if total <= MAX_SECONDS => Ok(total),
        _ => Err(bad("more than a year")),
    }
}

/// Memory as Slurm's `--mem` takes it: whole GiB as `G`, else MiB as `M`.
pub fn slurm_mem(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// Memory as a Kubernetes quantity: whole GiB as `Gi`, else `Mi`.
pub fn k8s_mem(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    }
}

/// A time limit as Slurm's `--time` takes it: `H:MM:SS`, with days (`D-HH:MM:SS`) from 24 hours.
pub fn slurm_time(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h}:{m:02}:{s:02}")
    }
}

/// Whole minutes covering `seconds` (GitHub's `timeout-minutes`).
pub fn minutes(seconds: u64) -> u64 {
    seconds.div_ceil(60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_sizes_and_times_read_as_slurm_reads_them() {
        assert_eq!(parse_mem("4G").unwrap(), 4096);
        assert_eq!(parse_mem("4096M").unwrap(), 4096);
        assert_eq!(parse_mem("4096").unwrap(), 4096);
        assert_eq!(parse_mem("1500k").unwrap(), 2);
        assert_eq!(parse_mem("1T").unwrap(), 1 << 20);
        for bad in [
            "",
            "G",
            "4GB",
            "4.5G",
            "-1G",
            "0",
            "0M",
            "65T",
            "99999999999999999999",
            "4X",
        ] {
            assert!(parse_mem(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_time("90").unwrap(), 5400);
        assert_eq!(parse_time("90:30").unwrap(), 5430);
        assert_eq!(parse_time("1:02:03").unwrap(), 3723);
        assert_eq!(parse_time("2-3").unwrap(), 2 * 86_400 + 3 * 3600);
        assert_eq!(parse_time("2-03:04").unwrap(), 2 * 86_400 + 3 * 3600 + 4 * 60);
        assert_eq!(parse_time("0-00:00:30").unwrap(), 30);
        for bad in [
            "",
            "0",
            "0:0",
            "UNLIMITED",
            "infinite",
            "1:2:3:4",
            "a",
            "1-",
            "-1",
            "1.5",
            "366-0",
            "1--2",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_cpus("8").unwrap(), 8);
        assert!(parse_cpus("0").is_err() && parse_cpus("4097").is_err() && parse_cpus("two").is_err());
    }

    #[test]
    fn figures_are_written_as_each_engine_reads_them() {
        assert_eq!(slurm_mem(4096), "4G");
        assert_eq!(slurm_mem(768), "768M");
        assert_eq!(k8s_mem(2048), "2Gi");
        assert_eq!(k8s_mem(768), "768Mi");
        assert_eq!(slurm_time(360), "0:06:00");
        assert_eq!(slurm_time(3723), "1:02:03");
        assert_eq!(slurm_time(86_400 + 61), "1-00:01:01");
        assert_eq!(minutes(361), 7);
        assert_eq!(minutes(360), 6);
        for seconds in [30, 360, 5430, 86_400 + 3723] {
            assert_eq!(parse_time(&slurm_time(seconds)).unwrap(), seconds);
        }
    }
}
