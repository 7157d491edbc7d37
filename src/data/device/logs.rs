//! What a device's logs say about where the model ran: QNN error codes with their meaning, the
//! QNN EP's partition summary and the nodes it refused, the placement of nodes on execution
//! providers, a QNN backend that failed to load, CPU fallback disabled, and the versions of ONNX
//! Runtime, the QNN plugin, the QNN API and the QNN SDK build; then what of this contradicts
//! `device.json`.
//!
//! Lines are read in the formats support staff receive: `adb logcat` (`threadtime`:
//! `11-23 10:01:02.345  1234  1250 I onnxruntime: ...`; `brief`/`time`: `E/onnxruntime( 1234): ...`),
//! and ONNX Runtime's own log (`2026-11-23 10:01:02.345 [I:onnxruntime:, file.cc:123 Func] ...`,
//! with or without terminal colours). The strings recognised are ONNX Runtime's QNN EP's
//! (`qnn_execution_provider.cc`, `qnn_backend_manager.cc`, `qnn_model.cc`), its session's
//! (`session_state.cc`, `inference_session.cc`) and QNN's own (`QnnDsp <E> ...`), as those sources
//! and a verbose log of onnxruntime 1.31.1 with the QNN plugin 2.7.0 print them
//! (`docs/device-reports.md`, "Logs"). Logs are a stranger's text: every line is cut to
//! [`MAX_LINE_CHARS`] before it is read, and everything kept is capped.

mod codes;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{identify_device, DeviceInfo};
use crate::data::target::chipset::Chipset;

pub use codes::{is_qnn_code, meaning as qnn_code_meaning, name as qnn_code_name};

/// A longer line is read up to this many characters.
pub const MAX_LINE_CHARS: usize = 4096;
/// The most evidence lines kept, and the most characters of each.
const MAX_EVIDENCE: usize = 16;
const MAX_EVIDENCE_CHARS: usize = 240;
/// The most refused nodes, distinct error codes and execution provider names kept.
const MAX_UNSUPPORTED: usize = 64;
const MAX_ERRORS: usize = 16;
const MAX_EPS: usize = 16;

/// What the logs of one report say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogFindings {
    /// Lines read, over every log file.
    pub lines_read: u64,
    /// QNN error codes, each once, in the order first seen.
    pub qnn_errors: Vec<QnnError>,
    /// The QNN backend could not be set up (`QNN SetupBackend failed ...`, `Unable to load
    /// backend ...`): the QNN EP took no node and ONNX Runtime ran the model on the CPU EP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_failure: Option<String>,
    pub fallback: Fallback,
    /// `Node(s) placed on [EP]. Number of nodes: N` of the last session in the log (verbose).
    /// A QNN partition is one fused node here, so QNN's count is its number of partitions.
    pub placements: Vec<Placement>,
    /// Execution providers the log names (`QNNExecutionProvider`, `CPUExecutionProvider`, ...).
    pub execution_providers: Vec<String>,
    /// The QNN backend ORT loaded (`HTP (HTP_QTI_AISW)`), from `Found valid interface`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_backend: Option<String>,
    /// The QNN EP's `htp_arch` and `soc_model` options as it read them (`User specified ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub htp_arch: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soc_model: Option<u32>,
    /// The QNN core API version of the backend library (`2.40.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_api_version: Option<String>,
    /// The QNN SDK build of the backend (`v2.51.0.260929181845`, `Backend build version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_sdk_build: Option<String>,
    /// The `onnxruntime-qnn` plugin release the log names (an app's line or a library path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_release: Option<String>,
    /// The ONNX Runtime version the log names (`ORT Build Info: git-branch=rel-X.Y.Z`, an app's
    /// `onnxruntime version: X.Y.Z`, `libonnxruntime.so.X.Y.Z`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort_version: Option<String>,
    /// The lines that show this, as `file:line: text` (one line each, capped).
    pub evidence: Vec<String>,
    /// What the logs say that `device.json` contradicts.
    pub contradictions: Vec<String>,
}

/// One QNN error code seen in the logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QnnError {
    pub code: u32,
    /// The QNN API's name for it (`QNN_COMMON_ERROR_MEM_ALLOC`).
    pub name: String,
    /// What failed and what it usually means.
    pub meaning: String,
    /// Lines that carry it.
    pub count: u64,
    /// The first line that carries it (`file:line: text`).
    pub line: String,
}

/// How much of the graph the QNN EP took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fallback {
    /// QNN partitions (`Number of partitions supported by QNN EP`, the last one logged, else QNN's
    /// placement count). More than one: the graph is cut, CPU EP runs between the partitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_on_qnn: Option<u64>,
    /// From the CPU EP's placement line, else the graph's nodes less QNN's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_on_cpu: Option<u64>,
    /// Node units the QNN EP refused, each (op type, node) once.
    pub unsupported_nodes: Vec<UnsupportedNode>,
    /// Refusals logged, repeats included.
    pub unsupported_count: u64,
    /// `session.disable_cpu_ep_fallback` refused the session (`fallback to CPU EP has been
    /// explicitly disabled`).
    pub fallback_disabled: bool,
}

/// A node (unit) the QNN EP refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnsupportedNode {
    pub op_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Nodes one execution provider got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    pub ep: String,
    pub nodes: u64,
}

struct Patterns {
    ansi: Regex,
    threadtime: Regex,
    brief: Regex,
    ort: Regex,
    summary: Regex,
    placed: Regex,
    validation: Regex,
    member: Regex,
    reason: Regex,
    not_supported: Regex,
    node_supported: Regex,
    unsupported_list: Regex,
    list_item: Regex,
    backend_failure: Regex,
    code: Regex,
    paren_code: Regex,
    interface: Regex,
    build: Regex,
    sdk: Regex,
    option: Regex,
    ort_version: Regex,
    qnn_release: Regex,
    ep: Regex,
}

fn re(s: &str) -> Regex {
    // The patterns are constants of this file, checked by its tests.
    Regex::new(s).unwrap_or_else(|e| panic!("log pattern {s}: {e}"))
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        ansi: re(r"\x1b\[[0-9;]*[A-Za-z]"),
        threadtime: re(r"^\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\d+\s+[VDIWEFAS]\s+[^:]*?\s*:\s?(.*)$"),
        brief: re(r"^(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}\.\d+\s+)?[VDIWEFAS]/[^(:]*?\s*(?:\(\s*\d+\))?:\s?(.*)$"),
        ort: re(r"^(?:\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+)?\[[VIWEF]:onnxruntime:[^\]]*\]\s?(.*)$"),
        summary: re(r"Number of partitions supported by QNN EP: (\d+)(?:, number of nodes in the graph: (\d+), number of nodes supported by QNN: (\d+))?"),
        placed: re(r"(Node\(s\)|All nodes) placed on \[(\w+)\]\. Number of nodes: (\d+)"),
        validation: re(r"Validation (FAILED|PASSED) for \d+ nodes in (?:Ort)?NodeUnit \(([^)]*)\)"),
        member: re(r"^Operator type: (\S+) Node name: (.*?) Node index: \d+"),
        reason: re(r"^REASON\s*:\s*(.*)$"),
        not_supported: re(r"^(\S+) node `([^`]*)` is not supported: (.*)$"),
        node_supported: re(r"Node supported: \[0\] index: \[\d+\] name: \[([^\]]*)\] Operator type: \[([^\]]*)\]"),
        unsupported_list: re(r"Unsupported nodes in QNN EP: (.*)$"),
        list_item: re(r"\{ name: ([^,]*), type: ([^ }]*) \}"),
        backend_failure: re(r"(?i)(QNN SetupBackend failed.*|Unable to load backend.*|Failed to get QNN providers.*|Unable to find a valid interface for.*)"),
        code: re(r"(?i)\b(?:error code|err(?:or)?|code|status)\s*[:=]?\s*(0x[0-9a-f]{1,8}|\d{4,5})\b"),
        paren_code: re(r"\((\d{4,5})\)"),
        interface: re(r"Found valid interface, version: (\d+\.\d+\.\d+) backend provider name: (\S+) backend id: (\d+)"),
        build: re(r"Backend build version: (v?\d[\w.]*)"),
        sdk: re(r#"(?i)\b(?:QNN SDK|QAIRT(?: SDK)?|qnn_sdk(?:_version)?)["']?(?:\s+version)?\s*[:= ]\s*["']?(v?\d+\.\d+\.\d+(?:\.\d+)?)"#),
        option: re(r"User specified (htp_arch|soc_model): (\d+)"),
        ort_version: re(r#"(?i)(?:ORT Build Info: git-branch=rel-|libonnxruntime\.so\.|\bonnx ?runtime(?:[ _-]?version)?["']?\s*(?:[:=]\s*|\s+)["']?v?)(\d+\.\d+\.\d+)\b"#),
        qnn_release: re(r#"(?i)\bonnxruntime[-_]qnn(?:[ _-]?version)?["']?\s*(?:[:=]\s*|\s+|-)["']?v?(\d+\.\d+\.\d+)\b"#),
        ep: re(r"\b([A-Z][A-Za-z]*ExecutionProvider)\b"),
    })
}

/// The first `MAX_LINE_CHARS` characters of `line`.
fn capped(line: &str) -> &str {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

/// A log line without its logcat and ONNX Runtime prefixes and colours: the message itself.
pub fn message(line: &str) -> String {
    let p = patterns();
    let line = capped(line);
    let clean = if line.contains('\x1b') {
        p.ansi.replace_all(line, "").into_owned()
    } else {
        line.to_string()
    };
    let mut text = clean.trim_end_matches(['\r', '\n']).to_string();
    for pat in [&p.threadtime, &p.brief, &p.ort] {
        if let Some(c) = pat.captures(&text) {
            text = c.get(1).map_or("", |m| m.as_str()).to_string();
        }
    }
    text.trim().to_string()
}

/// How much a kind of line matters as evidence (lower first).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Weight {
    Failure,
    Placement,
    Version,
    Refusal,
}

/// The parser's state over the lines of every file.
#[derive(Default)]
struct Reader {
    f: LogFindings,
    /// A `Validation FAILED` block being read: the unit's op type and its members.
    unit: Option<(String, Vec<(String, String)>)>,
    /// The placement block being read (an EP seen twice starts a new session's block).
    block: Vec<Placement>,
    errors: BTreeMap<u32, usize>,
    evidence: Vec<(Weight, usize, String)>,
    seen: std::collections::BTreeSet<String>,
    order: usize,
    where_: String,
}

impl Reader {
    /// Keeps `text` as evidence: each text once, at most [`MAX_EVIDENCE`] of each weight (so
    /// hundreds of refusals cannot crowd out the one error that matters).
    fn cite(&mut self, w: Weight, text: &str) {
        let of_weight = self.evidence.iter().filter(|(x, _, _)| *x == w).count();
        if of_weight < MAX_EVIDENCE && self.seen.insert(text.to_string()) {
            let line = format!("{}: {}", self.where_, crate::foundation::error::one_line_str(text));
            self.order += 1;
            self.evidence
                .push((w, self.order, line.chars().take(MAX_EVIDENCE_CHARS).collect()));
        }
    }

    fn line(&mut self, text: &str) {
        self.f.lines_read += 1;
        if self.unit_line(text) {
            return;
        }
        self.placement(text);
        self.summary(text);
        self.refusals(text);
        self.failures(text);
        self.versions(text);
        self.eps(text);
    }

    /// Lines inside a `Validation FAILED` block; true when the line belonged to it.
    fn unit_line(&mut self, text: &str) -> bool {
        let p = patterns();
        if let Some(c) = p.validation.captures(text) {
            self.close_unit(None);
            if &c[1] == "FAILED" {
                self.unit = Some((c[2].to_string(), Vec::new()));
                self.cite(Weight::Refusal, text);
            }
            return true;
        }
        let Some((_, members)) = self.unit.as_mut() else {
            return false;
        };
        if let Some(c) = p.member.captures(text) {
            if members.len() < 64 {
                members.push((c[1].to_string(), c[2].to_string()));
            }
            return true;
        }
        if let Some(c) = p.reason.captures(text) {
            let reason = c[1].to_string();
            self.cite(Weight::Refusal, text);
            self.close_unit(Some(reason));
            return true;
        }
        self.close_unit(None);
        false
    }

    fn close_unit(&mut self, reason: Option<String>) {
        let Some((op, members)) = self.unit.take() else {
            return;
        };
        let node = members
            .iter()
            .find(|(o, _)| *o == op)
            .or(members.first())
            .map(|(_, n)| n.clone());
        self.refused(op, node, reason);
    }

    fn refused(&mut self, op_type: String, node: Option<String>, reason: Option<String>) {
        let fb = &mut self.f.fallback;
        fb.unsupported_count += 1;
        let known = fb
            .unsupported_nodes
            .iter()
            .any(|u| u.op_type == op_type && u.node == node);
        if !known && fb.unsupported_nodes.len() < MAX_UNSUPPORTED {
            let cut = |s: String| s.chars().take(MAX_EVIDENCE_CHARS).collect::<String>();
            fb.unsupported_nodes.push(UnsupportedNode {
                op_type: cut(op_type),
                node: node.map(cut),
                reason: reason.map(cut),
            });
        }
    }

    /// The older QNN EP's refusals: a warning per node, the verbose `Node supported: [0]`, and the
    /// list it prints when CPU fallback is disabled.
    fn refusals(&mut self, text: &str) {
        let p = patterns();
        if let Some(c) = p.not_supported.captures(text) {
            self.refused(c[1].to_string(), Some(c[2].to_string()), Some(c[3].to_string()));
            self.cite(Weight::Refusal, text);
        } else if let Some(c) = p.node_supported.captures(text) {
            self.refused(c[2].to_string(), Some(c[1].to_string()), None);
            self.cite(Weight::Refusal, text);
        } else if let Some(c) = p.unsupported_list.captures(text) {
            let items: Vec<(String, String)> = p
                .list_item
                .captures_iter(&c[1])
                .map(|i| (i[2].to_string(), i[1].to_string()))
                .collect();
            for (op, node) in items {
                self.refused(op, Some(node), None);
            }
            self.cite(Weight::Failure, text);
        }
    }

    fn placement(&mut self, text: &str) {
        let Some(c) = patterns().placed.captures(text) else {
            return;
        };
        let ep = c[2].to_string();
        let Ok(nodes) = c[3].parse::<u64>() else {
            return;
        };
        if self.block.iter().any(|p| p.ep == ep) {
            self.block.clear();
        }
        self.block.push(Placement { ep, nodes });
        self.cite(Weight::Placement, text);
    }

    fn summary(&mut self, text: &str) {
        let Some(c) = patterns().summary.captures(text) else {
            return;
        };
        let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<u64>().ok());
        let fb = &mut self.f.fallback;
        // ORT asks the EP more than once (before and after layout transformation): the last counts.
        fb.partitions = num(1);
        fb.nodes_total = num(2);
        fb.nodes_on_qnn = num(3).or(if num(1) == Some(0) { Some(0) } else { None });
        self.cite(Weight::Placement, text);
    }

    fn failures(&mut self, text: &str) {
        let p = patterns();
        if text
            .to_lowercase()
            .contains("fallback to cpu ep has been explicitly disabled")
        {
            self.f.fallback.fallback_disabled = true;
            self.cite(Weight::Failure, text);
        }
        if let Some(c) = p.backend_failure.captures(text) {
            if self.f.backend_failure.is_none() {
                let msg: String = crate::foundation::error::one_line_str(&c[1])
                    .chars()
                    .take(MAX_EVIDENCE_CHARS)
                    .collect();
                self.f.backend_failure = Some(msg);
            }
            self.cite(Weight::Failure, text);
        }
        if let Some(code) = qnn_code_in(text) {
            self.error(code, text);
        }
    }

    fn error(&mut self, code: u32, text: &str) {
        let line = format!("{}: {}", self.where_, crate::foundation::error::one_line_str(text));
        let line: String = line.chars().take(MAX_EVIDENCE_CHARS).collect();
        match self.errors.get(&code) {
            Some(&i) => self.f.qnn_errors[i].count += 1,
            None if self.f.qnn_errors.len() < MAX_ERRORS => {
                self.errors.insert(code, self.f.qnn_errors.len());
                self.f.qnn_errors.push(QnnError {
                    code,
                    name: codes::name(code),
                    meaning: codes::meaning(code, stage_of(text)),
                    count: 1,
                    line,
                });
            }
            None => {}
        }
        self.cite(Weight::Failure, text);
    }

    fn versions(&mut self, text: &str) {
        let p = patterns();
        let one = |r: &Regex| r.captures(text).and_then(|c| c.get(1)).map(|m| m.as_str().to_string());
        let mut found = false;
        let (api, backend) = match p.interface.captures(text) {
            Some(c) => (
                Some(c[1].to_string()),
                Some(format!("{} ({})", backend_name(&c[3]), &c[2])),
            ),
            None => (None, None),
        };
        // A value is quoted when it is new: the same path or version repeated is one line.
        for (slot, value) in [
            (&mut self.f.qnn_api_version, api),
            (&mut self.f.qnn_backend, backend),
            (&mut self.f.qnn_sdk_build, one(&p.build).or_else(|| one(&p.sdk))),
            (&mut self.f.qnn_release, one(&p.qnn_release)),
            (&mut self.f.ort_version, one(&p.ort_version)),
        ] {
            if value.is_some() && *slot != value {
                *slot = value;
                found = true;
            }
        }
        if let Some(c) = p.option.captures(text) {
            let v = c[2].parse().ok();
            let slot = if &c[1] == "htp_arch" {
                &mut self.f.htp_arch
            } else {
                &mut self.f.soc_model
            };
            found |= *slot != v;
            *slot = v;
        }
        if found {
            self.cite(Weight::Version, text);
        }
    }

    fn eps(&mut self, text: &str) {
        if !text.contains("ExecutionProvider") {
            return;
        }
        for c in patterns().ep.captures_iter(text) {
            let ep = c[1].to_string();
            let list = &mut self.f.execution_providers;
            if !list.contains(&ep) && list.len() < MAX_EPS {
                list.push(ep);
            }
        }
    }

    fn finish(mut self) -> LogFindings {
        self.close_unit(None);
        let fb = &mut self.f.fallback;
        let cpu = self
            .block
            .iter()
            .find(|p| p.ep == "CPUExecutionProvider")
            .map(|p| p.nodes);
        let qnn = self
            .block
            .iter()
            .find(|p| p.ep == "QNNExecutionProvider")
            .map(|p| p.nodes);
        // Placements say something about QNN only in a log where QNN took part.
        let qnn_in_log = self.f.execution_providers.iter().any(|e| e == "QNNExecutionProvider")
            || self.f.backend_failure.is_some()
            || fb.partitions.is_some();
        if let (Some(n), 1, true) = (cpu, self.block.len(), qnn_in_log) {
            // Every node on the CPU EP: QNN took none, whatever its summary said before.
            fb.nodes_on_qnn = Some(0);
            fb.nodes_total = fb.nodes_total.or(Some(n));
            fb.partitions = fb.partitions.or(Some(0));
        }
        // A QNN partition is one fused node in the placement lines.
        fb.partitions = fb.partitions.or(qnn);
        fb.nodes_on_cpu = cpu.or(match (fb.nodes_total, fb.nodes_on_qnn) {
            (Some(t), Some(q)) => Some(t.saturating_sub(q)),
            _ => None,
        });
        self.f.placements = self.block;
        self.evidence.sort_by_key(|(w, order, _)| (*w, *order));
        self.evidence.truncate(MAX_EVIDENCE);
        self.evidence.sort_by_key(|(_, order, _)| *order);
        self.f.evidence = self
            .evidence
            .into_iter()
            .map(|(_, _, l)| l.chars().take(MAX_EVIDENCE_CHARS).collect())
            .collect();
        self.f
    }
}

/// The QNN backend ids of `QnnCommon.h` (`QNN_BACKEND_ID_*`).
fn backend_name(id: &str) -> &'static str {
    match id {
        "1" => "reference",
        "2" => "Saver",
        "3" => "CPU",
        "4" => "GPU",
        "5" => "DSP",
        "6" => "HTP",
        _ => "backend",
    }
}

/// What was failing when a line carries a code, when the line says.
fn stage_of(text: &str) -> Option<&'static str> {
    let t = text.to_lowercase();
    [
        ("finaliz", "graph finalization"),
        ("compose", "graph composition"),
        ("execute", "graph execution"),
        ("setupbackend", "backend setup"),
        ("load backend", "backend setup"),
        ("context", "context creation"),
        ("addnode", "adding a node"),
        ("validateopconfig", "op validation"),
    ]
    .into_iter()
    .find(|(k, _)| t.contains(k))
    .map(|(_, s)| s)
}

/// A QNN error code on a line about QNN (`Error code: 1002`, `err 1002`, `status 0x3ea`,
/// `finalize QNN graph (6020)`), within QNN's error ranges.
fn qnn_code_in(text: &str) -> Option<u32> {
    if !text.to_lowercase().contains("qnn") {
        return None;
    }
    let p = patterns();
    let raw = p
        .code
        .captures(text)
        .or_else(|| p.paren_code.captures(text))
        .and_then(|c| c.get(1))?
        .as_str()
        .to_lowercase();
    let code = match raw.strip_prefix("0x") {
        // A Qnn_ErrorHandle_t's code is its low 16 bits (QNN_GET_ERROR_CODE).
        Some(hex) => u64::from_str_radix(hex, 16).ok()? & 0xFFFF,
        None => raw.parse::<u64>().ok()?,
    };
    let code = u32::try_from(code).ok()?;
    codes::is_qnn_code(code).then_some(code)
}

impl LogFindings {
    /// Reads every log of a report (`DeviceReport::logs`: file name, text).
    pub fn parse(logs: &[(String, String)]) -> LogFindings {
        let mut r = Reader::default();
        for (file, text) in logs {
            let file = crate::foundation::error::one_line_str(file);
            for (i, line) in text.lines().enumerate() {
                r.where_ = format!("{file}:{}", i + 1);
                r.line(&message(line));
            }
            r.close_unit(None);
        }
        r.finish()
    }

    /// Whether the logs show the QNN EP did not run the whole model on the NPU.
    pub fn shows_problem(&self) -> bool {
        let fb = &self.fallback;
        !self.qnn_errors.is_empty()
            || self.backend_failure.is_some()
            || fb.fallback_disabled
            || fb.partitions.is_some_and(|p| p != 1)
            || matches!((fb.nodes_on_qnn, fb.nodes_total), (Some(q), Some(t)) if q < t)
    }

    /// One clause saying how much QNN took and why not more (`QNN took 0 of 212 nodes (the QNN
    /// backend failed to load)`), when the logs say anything about it.
    pub fn reason(&self) -> Option<String> {
        let fb = &self.fallback;
        let took = match (fb.nodes_on_qnn, fb.nodes_total) {
            (Some(q), Some(t)) => Some(format!(
                "QNN took {q} of {t} nodes{}",
                match fb.partitions {
                    Some(p) if p > 1 => format!(" in {p} partitions"),
                    _ => String::new(),
                }
            )),
            (Some(0), None) => Some("QNN took no node".to_string()),
            _ => None,
        };
        let mut why: Vec<String> = Vec::new();
        if self.backend_failure.is_some() {
            why.push("the QNN backend failed to load".into());
        }
        for e in self.qnn_errors.iter().take(2) {
            why.push(format!("QNN error {} {}", e.code, e.name));
        }
        if fb.fallback_disabled {
            why.push("CPU fallback was disabled, so the session was refused".into());
        }
        if !fb.unsupported_nodes.is_empty() {
            why.push(format!("refused: {}", refused_ops(&fb.unsupported_nodes)));
        }
        match (took, why.is_empty()) {
            (None, true) => None,
            (None, false) => Some(why.join("; ")),
            (Some(t), true) => Some(t),
            (Some(t), false) => Some(format!("{t} ({})", why.join("; "))),
        }
    }
}

/// `Gelu ×2, Erf` for the refused nodes, at most four op types.
fn refused_ops(nodes: &[UnsupportedNode]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for n in nodes {
        match counts.iter_mut().find(|(o, _)| *o == n.op_type) {
            Some((_, c)) => *c += 1,
            None => counts.push((n.op_type.clone(), 1)),
        }
    }
    let mut parts: Vec<String> = counts
        .iter()
        .take(4)
        .map(|(o, c)| if *c > 1 { format!("{o} ×{c}") } else { o.clone() })
        .collect();
    if counts.len() > 4 {
        parts.push(format!("{} more op types", counts.len() - 4));
    }
    parts.join(", ")
}

/// `x.y.z` as numbers (a leading `v` and a fourth part ignored; missing parts are 0), else the
/// text itself.
fn version_key(v: &str) -> Result<[u64; 3], String> {
    let t = v.trim().trim_start_matches(['v', 'V']);
    let mut out = [0u64; 3];
    let parts: Vec<&str> = t.split('.').collect();
    for (slot, part) in out.iter_mut().zip(&parts) {
        *slot = part.parse().map_err(|_| t.to_lowercase())?;
    }
    Ok(out)
}

fn same_version(a: &str, b: &str) -> bool {
    version_key(a) == version_key(b)
}

/// What the logs say that `device.json` (and the catalogue's QNN SDK of the release it names,
/// `release_sdk`) contradicts, one sentence each, stored in `f.contradictions`.
pub fn cross_check(f: &mut LogFindings, info: &DeviceInfo, release_sdk: Option<&str>) {
    let mut out = Vec::new();
    let pairs = [
        (
            "onnxruntime_version",
            &info.onnxruntime_version,
            &f.ort_version,
            "ONNX Runtime",
        ),
        (
            "qnn_release",
            &info.qnn_release,
            &f.qnn_release,
            "the onnxruntime-qnn plugin",
        ),
    ];
    for (key, said, seen, what) in pairs {
        if let (Some(s), Some(l)) = (said, seen) {
            if !same_version(s, l) {
                out.push(format!("device.json says {key} {s}, the log shows {what} {l}"));
            }
        }
    }
    if let (Some(rel), Some(sdk), Some(build)) = (&info.qnn_release, release_sdk, &f.qnn_sdk_build) {
        if !same_version(sdk, build) {
            out.push(format!(
                "device.json says qnn_release {rel} (QNN SDK {sdk}), the log shows QNN SDK build {build}"
            ));
        }
    }
    out.extend(ep_contradictions(f, info));
    out.extend(chipset_contradictions(f, info));
    f.contradictions = out;
}

fn ep_contradictions(f: &LogFindings, info: &DeviceInfo) -> Option<String> {
    let ep = info.ep.as_deref()?;
    let fb = &f.fallback;
    if ep.to_lowercase().contains("qnn") {
        if let Some(msg) = &f.backend_failure {
            return Some(format!(
                "device.json says ep {ep}, but the QNN backend failed to load: {msg}"
            ));
        }
        if fb.nodes_on_qnn == Some(0) {
            let all = fb
                .nodes_on_cpu
                .map_or(String::new(), |n| format!(" (all {n} on the CPU EP)"));
            return Some(format!(
                "device.json says ep {ep}, but the log shows QNN took no node{all}"
            ));
        }
    } else if let Some(q) = fb.nodes_on_qnn.filter(|q| *q > 0) {
        return Some(format!(
            "device.json says ep {ep}, but the log shows QNN took {q} nodes"
        ));
    }
    None
}

fn chipset_contradictions(f: &LogFindings, info: &DeviceInfo) -> Vec<String> {
    let mut out = Vec::new();
    let identity = identify_device(info);
    let chip = identity.chipset.as_deref().and_then(Chipset::find);
    for (key, seen) in [("htp_arch", f.htp_arch), ("soc_model", f.soc_model)] {
        let Some(seen) = seen.filter(|v| *v != 0) else {
            continue;
        };
        if let Some(c) = chip {
            let expected = if key == "htp_arch" { c.htp_arch } else { c.soc_model };
            if expected != seen {
                out.push(format!(
                    "device.json identifies {} ({key} {expected}), but the QNN EP was given {key} {seen}",
                    c.sm.to_uppercase()
                ));
            }
        }
        if let Some(opt) = info.ep_options.get(key) {
            if opt.trim() != seen.to_string() {
                out.push(format!(
                    "device.json says ep_options.{key} {opt}, the log shows {key} {seen}"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
