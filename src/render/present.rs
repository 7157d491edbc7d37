//! How every renderer writes numbers and the sentences they share, so that the terminal,
//! Markdown, JUnit, HTML and node data never disagree about a figure: metrics with about four
//! significant digits, dB with two decimals, percentages with one, counts with their noun, and
//! the wording of a first divergence, a runtime, a placement summary.

use crate::report::common::Num;
use crate::report::compare::{
    DivergenceRules, LayerOverflow, LayerPointer, OverflowPointer, PlacementSummary, TargetReport, ThreadProbe,
};
use crate::report::device::{Identity, IdentityStatus};
use crate::report::facts::TargetRole;
use crate::report::triage::{FleetKind, Triage, VerdictKind};

/// A metric with about four significant digits; `inf`/`-inf`; `-` when there is no figure (NaN).
pub fn num(v: f64) -> String {
    if v.is_nan() {
        return "-".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        format!("{v:.3e}")
    } else {
        let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
        format!("{v:.decimals$}")
    }
}

/// A dB figure: two decimals when finite.
pub fn db(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        num(v)
    }
}

/// A stream run's figures as every renderer writes them: one row per target and run (free, then
/// teacher-forced).
pub struct StreamRow {
    pub target: String,
    /// `free` or `teacher-forced`.
    pub run: &'static str,
    /// Per decision: `28 of 375 steps differ (92.5% agree), first at step 4`.
    pub decisions: Vec<String>,
    /// `step 12`, or `never below 10 dB`.
    pub divergence: String,
    /// `+0.42 dB/step`, or `-`.
    pub growth: String,
    pub median_db: String,
    /// The state SQNR at the first and the last step.
    pub first_db: String,
    pub last_db: String,
}

/// The rows of a report's stream (empty without one).
pub fn stream_rows(report: &crate::report::compare::Report) -> Vec<StreamRow> {
    let Some(info) = &report.stream else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for t in &report.targets {
        let Some(st) = &t.stream else { continue };
        let runs = [("free", Some(&st.free)), ("teacher-forced", st.teacher_forced.as_ref())];
        for (kind, run) in runs {
            let Some(run) = run else { continue };
            rows.push(StreamRow {
                target: t.id.clone(),
                run: kind,
                decisions: run.decisions.iter().map(decision_text).collect(),
                divergence: run.divergence_step.map_or_else(
                    || format!("never below {} dB", db(info.divergence_sqnr_db.0)),
                    |s| format!("step {s}"),
                ),
                growth: run
                    .growth_db_per_step
                    .map_or("-".into(), |g| format!("{} dB/step", signed_db(g.0))),
                median_db: db(run.state_sqnr_median_db.0),
                first_db: run.state_sqnr_db.first().map_or("-".into(), |v| db(v.0)),
                last_db: run.state_sqnr_db.last().map_or("-".into(), |v| db(v.0)),
            });
        }
    }
    rows
}

/// One decision over a stream: how many steps decided otherwise, and the first.
pub fn decision_text(d: &crate::report::compare::DecisionSeries) -> String {
    let first = d
        .first_disagreement
        .map_or(String::new(), |s| format!(", first at step {s}"));
    format!(
        "{}: {} of {} steps differ ({} agree){first}",
        d.decision,
        d.disagreements,
        d.agrees.len(),
        pct(Some(d.agreement).filter(|a| !a.is_nan()))
    )
}

/// A dB figure that may be missing.
pub fn db_opt(v: Option<Num>) -> String {
    v.map_or("-".into(), |v| db(v.0))
}

/// A dB difference with its sign (`+6.10`; `+0.00` for any difference that rounds to zero).
pub fn signed_db(v: f64) -> String {
    signed(v, 2)
}

/// A difference with its sign and `decimals` decimals: `+0.50`, `-1.2`. A difference that rounds
/// to zero (a negative zero included) is `+0.0`, never `-0.0`; `inf`/`-inf`/`-` as [`num`].
pub fn signed(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return num(v);
    }
    let text = format!("{v:+.decimals$}");
    if text.starts_with('-') && text[1..].chars().all(|c| c == '0' || c == '.') {
        format!("+{}", &text[1..])
    } else {
        text
    }
}

/// A fraction in [0, 1] as a percentage with one decimal, or `-`.
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0))
}

/// A rate (a WER, a CER) as a percentage with its 95% interval: `12.5% (8.1–17.0)`, or
/// `0.0% (no interval)` when the sample cannot bound it.
pub fn rate_with_interval(v: Num, [lo, hi]: [Num; 2]) -> String {
    let value = pct(Some(v.0).filter(|x| !x.is_nan()));
    if lo.0.is_nan() || hi.0.is_nan() {
        format!("{value} (no interval)")
    } else {
        format!("{value} ({:.1}–{:.1})", 100.0 * lo.0, 100.0 * hi.0)
    }
}

/// A cosine similarity: six decimals when finite.
pub fn cosine(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        num(v)
    }
}

pub use crate::foundation::words::{count, plural_s};

/// Reports that copy another: `1 copy`, `3 copies`.
pub fn copies(n: usize) -> String {
    if n == 1 {
        "1 copy".into()
    } else {
        format!("{n} copies")
    }
}

/// At most `max` characters of `text`, with `…` when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub use crate::foundation::console::printable;

/// Escapes text for HTML or XML content and quoted attribute values.
pub fn escape_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// An execution provider's name without the `ExecutionProvider` suffix.
pub fn ep_short(ep: &str) -> &str {
    ep.strip_suffix("ExecutionProvider").unwrap_or(ep)
}

/// Bytes as `19200 B` (exact below 1 MiB) or `3.2 MiB`.
pub fn bytes(b: u64) -> String {
    if b < 1024 * 1024 {
        format!("{b} B")
    } else {
        format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
    }
}

/// A span of time for a person: `16 s` below 100 seconds, `4.5 min` below 100 minutes, else
/// `2.3 h`.
pub fn duration(seconds: f64) -> String {
    if seconds < 99.5 {
        format!("{seconds:.0} s")
    } else if seconds < 5970.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// A number in evidence tables in full: codes as integers, ideals to six decimals, floats as the
/// shortest f32 text (a last-bit difference must stay visible).
pub fn exact_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if (1e-3..1e7).contains(&v.abs()) {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').to_string()
    } else {
        format!("{:e}", v as f32)
    }
}

/// A gate rule's measured value or limit: dB rules with two decimals, counts without decimals,
/// others with about four significant digits; a value that could not be measured says so.
pub fn rule_value(rule: &str, v: Num) -> String {
    let x = v.0;
    if x.is_nan() {
        return "not measured".into();
    }
    if x.is_finite() && rule.ends_with("_db") {
        return format!("{x:.2}");
    }
    if x.is_finite() && x == x.trunc() && x.abs() < 1e15 {
        // Counts (fallback nodes, partitions, ran, bit_exact) read best without decimals.
        return format!("{x:.0}");
    }
    num(x)
}

/// A rule's measured value and limit as [`rule_value`] writes them, with every digit when the
/// short forms would read equal although the values differ (a rule failing by a hair).
pub fn rule_values(rule: &str, measured: Num, limit: Num) -> (String, String) {
    let (m, l) = (rule_value(rule, measured), rule_value(rule, limit));
    if m == l && measured.0 != limit.0 && measured.0.is_finite() && limit.0.is_finite() {
        return (format!("{}", measured.0), format!("{}", limit.0));
    }
    (m, l)
}

/// Where a layer is and what departs there: `#12 /embeddings/Add (Add) at t`, with codes for a
/// quantized layer, the relative error for a float one.
pub fn divergence_at(d: &LayerPointer) -> String {
    let what = match d.max_rel_error {
        Some(r) => format!("largest error {} of its largest magnitude", num(r.0)),
        None => format!(
            "{} {}, max {} LSB",
            count(d.differing as usize, "code"),
            if d.differing == 1 { "differs" } else { "differ" },
            d.max_steps
        ),
    };
    format!("#{} {} ({}) at {}: {what}", d.index, d.node, d.op_type, d.tensor)
}

/// The first overflow of a target in one line: `#7 /l3/norm/Pow (Pow) at t: the reference
/// reaches 1.1e6, past float16's 65,504, ...`.
pub fn overflow_at(o: &OverflowPointer) -> String {
    format!(
        "#{} {} ({}) at {}: {}",
        o.index,
        o.node,
        o.op_type,
        o.tensor,
        overflow_cause(&o.overflow)
    )
}

/// Why a layer is named as an overflow, in words.
pub fn overflow_cause(o: &LayerOverflow) -> String {
    let peak = num(o.reference_peak.0);
    let beyond = format!(
        "the reference reaches {peak}, past float16's 65,504, and the target, which computes it in float16, is off by up to {} there: it did not hold the values",
        num(o.max_abs_error.0)
    );
    match (o.nonfinite, o.beyond_float16()) {
        (0, _) => beyond,
        (n, true) => format!("{} ±inf or NaN; {beyond}", count(n as usize, "value")),
        (n, false) => format!(
            "{} ±inf or NaN where the reference's are finite (its peak {peak})",
            count(n as usize, "value")
        ),
    }
}

/// Whether the departing layer introduced the drift (it departs alone on golden inputs too) or
/// inherited it, as a clause to append; empty when it was not run alone.
pub fn attribution(d: &LayerPointer) -> &'static str {
    match d.introduced {
        Some(true) => "; alone on golden inputs it departs too: introduced here",
        Some(false) => "; alone on golden inputs it does not: inherited from its inputs",
        None => "",
    }
}

/// The three levels of departure from the baseline, each named with its threshold.
pub fn divergence_levels(rules: &DivergenceRules) -> [(&'static str, String); 3] {
    [
        ("first code difference", "any code".into()),
        (
            "first beyond rounding",
            format!(
                "> {} LSB; floats > {} of their largest magnitude",
                rules.tolerance_lsb,
                num(rules.float_tolerance)
            ),
        ),
        (
            "first SQNR loss",
            format!("> {} dB below the baseline", db(rules.sqnr_loss_db)),
        ),
    ]
}

/// One line per level on where a target first departs from the baseline, or why no layer is
/// named.
pub fn divergence_lines(t: &TargetReport, rules: &DivergenceRules) -> Vec<String> {
    let Some(summary) = &t.layer_summary else {
        return vec!["no per-layer summary".into()];
    };
    if t.role == TargetRole::Baseline {
        return vec!["the baseline: other targets' layers are compared with these".into()];
    }
    let found = [
        &summary.first_code_difference,
        &summary.first_beyond_rounding,
        &summary.first_sqnr_loss,
    ];
    let bisected = summary.bisect.is_some();
    let overflow = summary
        .first_overflow
        .as_ref()
        .map(|o| format!("first overflow (the cause before any SQNR ranking): {}", overflow_at(o)));
    let levels = divergence_levels(rules)
        .into_iter()
        .zip(found)
        .enumerate()
        .filter(|(k, _)| !bisected || *k == 1)
        .map(|(k, ((name, threshold), d))| match d {
            Some(d) if k == 2 => format!(
                "{name} ({threshold}): {}, {} dB against the baseline's {} dB{}",
                divergence_at(d),
                d.sqnr_db.map_or("-".into(), |v| db(v.0)),
                d.baseline_sqnr_db.map_or("-".into(), |v| db(v.0)),
                attribution(d)
            ),
            Some(d) => format!("{name} ({threshold}): {}{}", divergence_at(d), attribution(d)),
            None if summary.layers_not_compared > 0 => format!(
                "{name} ({threshold}): none among the layers compared; {} could not be compared with the baseline",
                count(summary.layers_not_compared, "layer")
            ),
            None => format!("{name} ({threshold}): none"),
        });
    overflow.into_iter().chain(levels).collect()
}

/// One sentence on where a target departs (the three levels, shortest form), for a legend.
pub fn divergence_sentence(t: &TargetReport, rules: &DivergenceRules) -> String {
    divergence_lines(t, rules).join("; ")
}

/// The first departure beyond rounding in a table cell: `#3 conv_c (Conv): 258 differ, max 2 LSB,
/// introduced`.
pub fn divergence_cell(t: &TargetReport, baseline: bool) -> String {
    let Some(summary) = &t.layer_summary else {
        return "-".into();
    };
    if baseline {
        return "(baseline)".into();
    }
    match &summary.first_beyond_rounding {
        Some(f) => {
            let how = match f.introduced {
                Some(true) => ", introduced",
                Some(false) => ", inherited",
                None => "",
            };
            let what = match f.max_rel_error {
                Some(r) => format!("error {} of range", num(r.0)),
                None => format!("{} differ, max {} LSB", f.differing, f.max_steps),
            };
            format!("#{} {} ({}): {what}{how}", f.index, f.node, f.op_type)
        }
        None if summary.layers_not_compared > 0 => format!("none ({} not compared)", summary.layers_not_compared),
        None if summary.error.is_some() => "error".into(),
        None => "none".into(),
    }
}

/// What running a target with other intra-op threads changed, in one sentence.
pub fn thread_probe_sentence(p: &ThreadProbe) -> String {
    let against = p.against_threads.map_or("the audit's".into(), |n| n.to_string());
    if let Some(e) = &p.error {
        return format!("the run with {} intra-op threads could not be compared: {e}", p.threads);
    }
    if p.bit_identical {
        return format!("same bits with {} intra-op threads as with {against}", p.threads);
    }
    let worst: Vec<String> = p
        .differences
        .iter()
        .take(3)
        .map(|d| {
            format!(
                "'{}' sample {}: {}/{} elements, max {}",
                printable(&d.output),
                d.sample,
                d.differing,
                d.elements,
                num(d.max_abs.0)
            )
        })
        .collect();
    format!(
        "DEPENDS ON THE THREAD COUNT: with {} intra-op threads instead of {against}, {} (sample, output) differ ({}{})",
        p.threads,
        p.differences.len(),
        worst.join("; "),
        if p.differences.len() > 3 { "; ..." } else { "" }
    )
}

/// One line on a target's placement: nodes on its EP and, for a non-CPU target, partitions,
/// compute ops left to the CPU, crossings and their bytes.
pub fn placement_line(p: &PlacementSummary, target_ep: &str) -> String {
    let mut line = format!(
        "{}/{} nodes on {}",
        p.target_ep_nodes,
        p.total_nodes,
        ep_short(target_ep)
    );
    if target_ep == crate::analyses::placement::CPU_EP {
        return line;
    }
    line.push_str(&format!(", {}", count(p.ep_partitions, "partition")));
    let mut compute: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for f in p.fallback.iter().filter(|f| f.kind == "compute") {
        *compute.entry(f.op_type.as_str()).or_default() += 1;
    }
    if compute.is_empty() {
        line.push_str(", no compute op on CPU");
    } else {
        let list: Vec<String> = compute.iter().map(|(op, k)| format!("{op} x{k}")).collect();
        line.push_str(&format!(
            ", {} on CPU: {}",
            count(p.compute_fallback_nodes, "compute op"),
            list.join(", ")
        ));
    }
    let size = p.crossing_bytes.map_or_else(|| "size unknown".into(), bytes);
    line.push_str(&format!(", {} ({size})", count(p.crossing_count, "crossing")));
    line
}

/// The host a report was made on, in one line: CPU, kernel class and the features that select
/// kernels (`AMD EPYC · x86-64-avx512-vnni kernels (avx2 fma avx512f ...)`), or that it is not
/// recorded.
pub fn host_line(host: Option<&crate::report::facts::HostInfo>) -> String {
    match host {
        Some(h) => format!("{} · {} kernels ({}) · {}", h.cpu, h.isa_class, h.isa.join(" "), h.os),
        None => "not recorded".into(),
    }
}

/// A triage verdict's stable keyword, as the JSON writes it (`cpu_fallback`).
pub fn verdict_keyword(kind: VerdictKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// How a device report was read, where it departs from the documented form: outputs whose files
/// were spelled otherwise than Qualcomm's converters spell them, and `device.json` keys outside
/// the schema (kept, not read).
pub fn how_read(e: &crate::report::triage::ReportEntry) -> Vec<String> {
    use crate::report::device::Spelling;
    let mut out: Vec<String> = e
        .output_files
        .iter()
        .filter(|f| f.spelling != Spelling::Sanitized)
        .map(|f| {
            let how = match f.spelling {
                Spelling::Sanitized => "as the converters spell it",
                Spelling::Collapsed => "runs of other characters written as one `_`",
                Spelling::SlashAsUnderscore => "`/` written as `_`",
                Spelling::AsNamed => "the output's name as it is",
                Spelling::Subdirectories => "`/` as subdirectories, as snpe-net-run writes it",
            };
            format!("output '{}' read from {} ({how})", f.output, f.file)
        })
        .collect();
    if let Some(d) = e.device.as_ref().filter(|d| !d.unknown_keys.is_empty()) {
        let keys: Vec<&str> = d.unknown_keys.keys().map(String::as_str).collect();
        out.push(format!(
            "device.json keys outside the schema, kept and not read: {}",
            keys.join(", ")
        ));
    }
    out
}

/// A device report's chipset: the part number in capitals, else how sure the identification is
/// (`(contradictory)`), else `-` for a report never read.
pub fn chipset_label(identity: Option<&Identity>) -> String {
    match identity {
        Some(i) => i
            .chipset
            .as_ref()
            .map_or_else(|| format!("({})", identity_status(i.status)), |c| c.to_uppercase()),
        None => "-".into(),
    }
}

/// A fleet conclusion's keyword, as the JSON writes it (`quantization`).
pub fn fleet_keyword(kind: FleetKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Reports per verdict keyword, in the order the verdicts are tried (`reproduced` first).
pub fn verdict_counts(t: &Triage) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<u8, (String, usize)> = std::collections::BTreeMap::new();
    for e in &t.reports {
        let entry = counts
            .entry(e.verdict.kind as u8)
            .or_insert_with(|| (verdict_keyword(e.verdict.kind), 0));
        entry.1 += 1;
    }
    counts.into_values().collect()
}

/// An identification's status keyword, as the JSON writes it (`not_simulated`).
pub fn identity_status(status: IdentityStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The triage thresholds in one line, as every triage rendering states them.
pub fn triage_thresholds(t: &crate::report::triage::Thresholds) -> String {
    format!(
        "rounding: within {} quantization steps; NPU drift: a chipset's median more than {} dB below the CPU EP's; \
         outlier: more than {} dB below its chipset's median; SQNR floor: {}",
        t.rounding_steps,
        db(t.excess_db),
        db(t.outlier_db),
        t.min_sqnr_db.map_or_else(|| "none".into(), |f| format!("{} dB", db(f)))
    )
}

/// A word as a POSIX shell reads it: as is when it holds only safe characters, else quoted.
fn shell_word(w: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c);
    if !w.is_empty() && w.chars().all(safe) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The `npu-audit repro` command that cuts out a target's first layer beyond rounding against
/// the report's baseline, as a standalone bundle (`None` without such a layer).
pub fn repro_command(
    report: &crate::report::compare::Report,
    t: &crate::report::compare::TargetReport,
) -> Option<String> {
    let layer = t.layer_summary.as_ref()?.first_beyond_rounding.as_ref()?;
    let mut words = vec!["npu-audit".to_string(), "repro".into(), shell_word(&report.model.path)];
    if report.reference.kind == "model" {
        words.extend(["--reference".to_string(), shell_word(&report.reference.path)]);
    }
    words.extend(["-t".to_string(), shell_word(&t.id)]);
    if let Some(b) = report.baseline.as_ref().filter(|b| *b != &t.id) {
        words.extend(["--against".to_string(), shell_word(b)]);
    }
    words.extend([
        "--layer".to_string(),
        shell_word(&layer.node),
        "--out".into(),
        "repro.zip".into(),
    ]);
    Some(words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_that_rounds_to_zero_is_plus_zero() {
        assert_eq!(signed(-0.0, 1), "+0.0");
        assert_eq!(signed(-0.004, 2), "+0.00");
        assert_eq!(signed_db(-0.001), "+0.00");
        assert_eq!(signed(0.0, 1), "+0.0");
        assert_eq!(signed(-0.06, 1), "-0.1");
        assert_eq!(signed(6.1, 2), "+6.10");
        assert_eq!(signed(f64::NEG_INFINITY, 2), "-inf");
        assert_eq!(count(1, "session"), "1 session");
        assert_eq!(count(2, "session"), "2 sessions");
    }

    #[test]
    fn numbers_are_short_and_honest() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.1258), "0.1258");
        assert_eq!(num(12.3456), "12.35");
        assert_eq!(num(1.5e-5), "1.500e-5");
        assert_eq!(num(f64::INFINITY), "inf");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(db(25.0561), "25.06");
        assert_eq!(signed_db(6.1), "+6.10");
        assert_eq!(signed_db(f64::NEG_INFINITY), "-inf");
        assert_eq!(pct(Some(0.9876)), "98.8%");
        assert_eq!(count(1, "rule"), "1 rule");
        assert_eq!(count(0, "rule"), "0 rules");
        assert_eq!(bytes(19200), "19200 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }

    #[test]
    fn rule_values_read_naturally() {
        assert_eq!(rule_value("min_sqnr_db", Num(25.0561)), "25.06");
        assert_eq!(rule_value("max_fallback_nodes", Num(1.0)), "1");
        assert_eq!(rule_value("max_abs", Num(0.030261)), "0.03026");
        assert_eq!(rule_value("min_sqnr_db", Num(f64::INFINITY)), "inf");
        assert_eq!(rule_value("max_fallback_nodes", Num(f64::NAN)), "not measured");
        assert_eq!(
            rule_values("min_sqnr_db", Num(32.499853), Num(32.5)),
            ("32.499853".to_string(), "32.5".to_string())
        );
        assert_eq!(
            rule_values("min_sqnr_db", Num(32.0), Num(32.5)),
            ("32.00".to_string(), "32.50".to_string())
        );
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(printable("a\u{1b}[31mb\nc"), "a\\u{1b}[31mb\\nc");
        assert_eq!(
            escape_markup(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
        );
    }
}
