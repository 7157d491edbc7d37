//! Target specifications: which execution provider, on which chipset, with which options. A target
//! is one configuration of one ONNX Runtime build that a model is audited on.

pub mod arm_cores;
pub mod chipset;

use crate::foundation::error::bad_flag;
use serde::{Deserialize, Serialize};
use std::fmt;

use anyhow::Result;

pub use arm_cores::{arm_core, ArmCore, ARM_CORES, DEFAULT_ARM_CORE};
pub use chipset::{Chipset, CHIPSETS};

/// Why a target is in the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetRole {
    /// Asked for (or chosen by default).
    Target,
    /// `cpu:noopt`, added by the audit as the reference integer implementation.
    Baseline,
}

/// The execution provider a target runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    /// The ARM64 CPU EP (the phone's own CPU fallback), emulated: qemu's model of `core`.
    Arm64 {
        core: &'static str,
    },
    Qnn(Chipset),
    OpenVino {
        device: String,
    },
    DirectMl,
    Cuda,
    TensorRt,
}

impl Backend {
    /// ONNX Runtime's name for the execution provider.
    pub fn ep_name(&self) -> &'static str {
        match self {
            Backend::Cpu | Backend::Arm64 { .. } => "CPUExecutionProvider",
            Backend::Qnn(_) => "QNNExecutionProvider",
            Backend::OpenVino { .. } => "OpenVINOExecutionProvider",
            Backend::DirectMl => "DmlExecutionProvider",
            Backend::Cuda => "CUDAExecutionProvider",
            Backend::TensorRt => "TensorrtExecutionProvider",
        }
    }
}

/// ONNX Runtime graph optimization level of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OptLevel {
    /// No graph rewrites: QDQ models execute op by op, the plain simulation of quantization.
    Disable,
    Basic,
    Extended,
    /// ONNX Runtime's default.
    All,
}

/// The runtime release a target asks for (`@2.6.0`, `@2.6.0+ort1.30.0`, `@all`); none means
/// the catalogue's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseSpec {
    /// Every release of the target's build that runs here (expanded against the catalogue).
    All,
    /// One release of the target's build (for a plugin EP: of the plugin), and for a plugin the
    /// core release that hosts it.
    Version { version: String, host: Option<String> },
}

impl fmt::Display for ReleaseSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseSpec::All => f.write_str("all"),
            ReleaseSpec::Version { version, host: None } => f.write_str(version),
            ReleaseSpec::Version { version, host: Some(h) } => write!(f, "{version}+ort{h}"),
        }
    }
}

/// A parsed `--target` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Canonical text, used as the target's id in every report.
    pub id: String,
    pub backend: Backend,
    pub opt: OptLevel,
    /// Extra `key=value` options: keys starting with `session.` are session config entries, the
    /// rest go to the execution provider.
    pub options: Vec<(String, String)>,
    /// The runtime release asked for (`None`: the pinned default).
    pub release: Option<ReleaseSpec>,
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// The target option that caps a runtime's kernels to an instruction-set class.
pub const ISA_OPTION: &str = "isa";

/// The variable oneDNN reads for its instruction-set cap; the audit sets it for a target with
/// `isa=` and removes it (and its older name) from every other worker's environment, so a cap in
/// the user's shell cannot change figures unrecorded.
pub const ONEDNN_ISA_VARIABLE: &str = "ONEDNN_MAX_CPU_ISA";

/// A oneDNN cap in the user's environment is not passed to the workers (it would change
/// OpenVINO's figures without the report saying): the note says so and names the target option.
pub fn ignored_isa_cap() -> Option<String> {
    [ONEDNN_ISA_VARIABLE, "DNNL_MAX_CPU_ISA"]
        .into_iter()
        .find_map(|name| Some((name, std::env::var(name).ok()?)))
        .map(|(name, value)| {
            format!("{name}={value} in the environment is not passed to the runtimes; cap OpenVINO's kernels with -t openvino,isa=<class> (docs/hosts.md)")
        })
}

/// The syntax every error message about a target spec repeats.
pub const TARGET_SYNTAX: &str = "cpu, cpu:noopt, cpu:basic, cpu:extended, cpu-arm64[:cortex-a76|neoverse-n1|cortex-a710-nosve|cortex-a710|neoverse-n2|neoverse-v1], qnn:<chipset>, qnn:all, openvino[:cpu|gpu|npu][,isa=avx2|...], dml, cuda, tensorrt; a release as @VERSION, @all or (QNN) @PLUGIN+ortCORE; options as ,key=value";

impl TargetSpec {
    /// Parses `KIND[:VARIANT][@RELEASE][,KEY=VALUE]*`; `qnn:all` expands to every known chipset
    /// (`@all`, every release, is expanded against the runtime catalogue later).
    pub fn parse_many(text: &str) -> Result<Vec<TargetSpec>> {
        let mut parts = text.split(',');
        let head = parts.next().unwrap_or("").trim();
        let options = parse_options(text, parts)?;
        let (head, release) = match head.split_once('@') {
            Some((h, r)) => (h.trim(), Some(parse_release(text, r.trim())?)),
            None => (head, None),
        };
        let mut specs = TargetSpec::parse_head(text, head, options)?;
        for spec in &specs {
            spec.check_isa_cap(text)?;
        }
        if let Some(r) = release {
            let plugin = specs.iter().any(|s| matches!(s.backend, Backend::Qnn(_)));
            if matches!(r, ReleaseSpec::Version { host: Some(_), .. }) && !plugin {
                return Err(bad_flag(format!(
                    "target '{text}': +ort names the core release of a plugin EP (QNN); give this target's release alone"
                )));
            }
            specs = specs.into_iter().map(|s| s.with_release(r.clone())).collect();
        }
        Ok(specs)
    }

    /// The QNN HTP target of one chipset, on the default release.
    pub fn qnn(chip: Chipset) -> TargetSpec {
        qnn_spec(chip, &[])
    }

    /// The same target on release `r`, its id carrying the release.
    pub fn with_release(mut self, r: ReleaseSpec) -> TargetSpec {
        let (head, options) = match self.id.split_once(',') {
            Some((h, o)) => (h.to_string(), format!(",{o}")),
            None => (self.id.clone(), String::new()),
        };
        let head = head.split('@').next().unwrap_or(&head).to_string();
        self.id = format!("{head}@{r}{options}");
        self.release = Some(r);
        self
    }

    /// The id without its release (`qnn:sm8650@2.6.0,x=y` -> `qnn:sm8650,x=y`): what two releases
    /// of one target have in common.
    pub fn id_without_release(&self) -> String {
        match self.id.split_once('@') {
            Some((head, rest)) => match rest.split_once(',') {
                Some((_, options)) => format!("{head},{options}"),
                None => head.to_string(),
            },
            None => self.id.clone(),
        }
    }

    fn parse_head(text: &str, head: &str, options: Vec<(String, String)>) -> Result<Vec<TargetSpec>> {
        let (kind, variant) = match head.split_once(':') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), Some(v.trim())),
            None => (head.to_ascii_lowercase(), None),
        };
        let kind = match kind.as_str() {
            "htp" => "qnn".to_string(),
            "ov" => "openvino".to_string(),
            "directml" => "dml".to_string(),
            "trt" => "tensorrt".to_string(),
            "arm64" => "cpu-arm64".to_string(),
            _ => kind,
        };
        let p = Parsed {
            text,
            kind: &kind,
            variant,
            options,
        };
        match (kind.as_str(), variant) {
            ("cpu", _) => p.cpu(),
            ("cpu-arm64", _) => p.arm64(),
            ("qnn", _) => p.qnn(),
            ("openvino", _) => p.openvino(),
            ("dml", None) => {
                // ort's DirectML binding takes no free-form options: refuse rather than drop them.
                if let Some((k, _)) = p.options.iter().find(|(k, _)| !k.starts_with("session.")) {
                    return Err(bad_flag(format!("target '{text}': DirectML takes no EP option '{k}'")));
                }
                Ok(vec![p.make(Backend::DirectMl, OptLevel::All, None)])
            }
            ("cuda", None) => Ok(vec![p.make(Backend::Cuda, OptLevel::All, None)]),
            ("tensorrt", None) => Ok(vec![p.make(Backend::TensorRt, OptLevel::All, None)]),
            _ => Err(p.unknown()),
        }
    }

    /// The EP options this target implies (QNN: the chipset's `htp_arch` and `soc_model`;
    /// OpenVINO: `device_type`), with the user's EP options on top. Session options excluded.
    pub fn ep_options(&self) -> Vec<(String, String)> {
        let mut options: Vec<(String, String)> = match &self.backend {
            Backend::Qnn(chip) => vec![
                ("htp_arch".into(), chip.htp_arch.to_string()),
                ("soc_model".into(), chip.soc_model.to_string()),
            ],
            Backend::OpenVino { device } => vec![("device_type".into(), device.clone())],
            _ => vec![],
        };
        for (k, v) in self
            .options
            .iter()
            .filter(|(k, _)| !k.starts_with("session.") && k != ISA_OPTION)
        {
            options.retain(|(existing, _)| existing != k);
            options.push((k.clone(), v.clone()));
        }
        options
    }

    /// The same target with more `key=value` options (a model variant's), checked as options
    /// given on the command line are: the id carries them.
    pub fn with_options(&self, extra: &[(String, String)]) -> Result<TargetSpec> {
        let mut spec = self.clone();
        for (k, v) in extra {
            if spec.options.iter().any(|(existing, _)| existing == k) {
                return Err(bad_flag(format!("target '{}': option '{k}' is given twice", self.id)));
            }
            let fixed = matches!(spec.backend, Backend::Qnn(_)) && (k == "soc_model" || k == "htp_arch");
            let refused = matches!(spec.backend, Backend::DirectMl) && !k.starts_with("session.");
            if fixed || refused {
                return Err(bad_flag(format!("target '{}': option '{k}' cannot be set", self.id)));
            }
            spec.id = format!("{},{k}={v}", spec.id);
            spec.options.push((k.clone(), v.clone()));
        }
        spec.check_isa_cap(&spec.id)?;
        Ok(spec)
    }

    /// The kernel class the target caps its runtime to (`openvino,isa=avx2`), if it does.
    pub fn isa_cap(&self) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == ISA_OPTION)
            .map(|(_, v)| v.as_str())
    }

    /// The environment the target's worker runs with: oneDNN's instruction-set cap for OpenVINO
    /// (`ONEDNN_MAX_CPU_ISA`, read once per process by the oneDNN inside OpenVINO's CPU plugin).
    pub fn environment(&self) -> Vec<(String, String)> {
        let value = |cap: &str| match cap {
            "sse4" => "SSE41",
            "avx2" => "AVX2",
            "avx2-vnni" => "AVX2_VNNI",
            "avx512" => "AVX512_CORE",
            "avx512-vnni" => "AVX512_CORE_VNNI",
            _ => "AVX512_CORE_AMX",
        };
        self.isa_cap()
            .map(|cap| vec![(ONEDNN_ISA_VARIABLE.to_string(), value(cap).to_string())])
            .unwrap_or_default()
    }

    /// `isa=` only where a runtime can cap its kernels, and only to a class this tool knows.
    fn check_isa_cap(&self, text: &str) -> Result<()> {
        let Some(cap) = self.isa_cap() else {
            return Ok(());
        };
        if !matches!(self.backend, Backend::OpenVino { .. }) {
            return Err(bad_flag(format!(
                "target '{text}': isa= caps OpenVINO's oneDNN kernels only; this runtime has no instruction-set cap (docs/hosts.md)"
            )));
        }
        if !crate::foundation::host::X86_CLASSES.contains(&cap) {
            return Err(bad_flag(format!(
                "target '{text}': isa={cap} is not a kernel class (one of {})",
                crate::foundation::host::X86_CLASSES.join(", ")
            )));
        }
        Ok(())
    }

    /// What the target's figures owe to `host` (`docs/hosts.md` has the measurements).
    pub fn host_dependence(&self, host: &crate::foundation::host::HostInfo) -> crate::foundation::host::TargetHost {
        use crate::foundation::host::{Dependence, TargetHost};
        let made = |dependence, isa_class: String, why: &str| TargetHost {
            dependence,
            isa_class,
            isa_cap: self.isa_cap().map(str::to_string),
            why: why.to_string(),
        };
        match &self.backend {
            Backend::OpenVino { .. } => made(
                Dependence::Measured,
                self.isa_cap()
                    .map_or_else(|| host.isa_class.clone(), |c| crate::foundation::host::capped_class(host, c)),
                "OpenVINO's CPU plugin picks its oneDNN int8 kernels by instruction set (the u8 CNN fixture is refused with AVX-512 VNNI and runs capped to AVX2; figures move by up to 0.5 dB); isa=<class> caps them",
            ),
            Backend::Cpu => made(
                Dependence::Measured,
                host.isa_class.clone(),
                "ONNX Runtime's MLAS picks kernels by CPUID and has no cap: without VNNI its u8 x s8 GEMM adds pairs in saturating 16 bits, and float kernels differ in vector width (a float path's SQNR above 100 dB moves between AVX2 and AVX-512 hosts)",
            ),
            Backend::Arm64 { core } => made(
                Dependence::Independent,
                format!("arm64-emulated-{core}"),
                "an emulated Arm core computes the same bits on every x86-64 host (qemu's model of the core fixes its features and vector length)",
            ),
            Backend::Qnn(_) => made(
                Dependence::Independent,
                host.isa_class.clone(),
                "the HTP simulator computes the chipset's fixed-point arithmetic (the fixtures' figures are identical on AVX2 and AVX-512 VNNI hosts)",
            ),
            Backend::DirectMl | Backend::Cuda | Backend::TensorRt => made(
                Dependence::Possible,
                host.isa_class.clone(),
                "a GPU's kernels depend on the GPU and its driver, which the report does not record",
            ),
        }
    }

    /// Whether the target computes float tensors in float16: the QNN HTP runs the float ops of
    /// a graph (a QDQ model's unquantized ops, or a float model) in float16, so a value past
    /// 65,504 overflows there (the per-layer audit names such a layer).
    pub fn computes_floats_in_float16(&self) -> bool {
        matches!(self.backend, Backend::Qnn(_))
    }

    /// The chipset of a QNN target.
    pub fn chipset(&self) -> Option<Chipset> {
        match self.backend {
            Backend::Qnn(c) => Some(c),
            _ => None,
        }
    }
}

/// The canonical id: `KIND[:VARIANT]` followed by the options as given.
fn spec_id(head: String, options: &[(String, String)]) -> String {
    options.iter().fold(head, |id, (k, v)| format!("{id},{k}={v}"))
}

fn qnn_spec(chip: Chipset, options: &[(String, String)]) -> TargetSpec {
    TargetSpec {
        id: spec_id(format!("qnn:{}", chip.sm), options),
        backend: Backend::Qnn(chip),
        opt: OptLevel::All,
        options: options.to_vec(),
        release: None,
    }
}

/// Every target the tool knows, one per chipset (what `targets` lists and what `compare` runs by
/// default, where the machine can).
pub fn all_known() -> Vec<TargetSpec> {
    let mut ids = vec!["cpu".to_string(), "cpu:noopt".to_string()];
    ids.extend(CHIPSETS.iter().map(|c| format!("qnn:{}", c.sm)));
    ids.extend(["openvino", "dml", "cuda", "tensorrt"].map(String::from));
    // These specs are the tool's own and parse (a test checks it).
    parse_targets(&ids).unwrap_or_default()
}

/// Parses every `--target` value, expanding groups and dropping repeats while keeping order.
pub fn parse_targets(values: &[String]) -> Result<Vec<TargetSpec>> {
    let lists = values
        .iter()
        .map(|v| TargetList::parse(v))
        .collect::<Result<Vec<_>>>()?;
    Ok(distinct(&lists))
}

/// One `--target` value (or a policy's `targets` entry), parsed: one target, or a group
/// (`qnn:all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetList {
    /// As written, for messages and `check-config`.
    pub text: String,
    pub specs: Vec<TargetSpec>,
}

impl TargetList {
    /// Parses `KIND[:VARIANT][@RELEASE][,KEY=VALUE]*`.
    pub fn parse(text: &str) -> Result<TargetList> {
        Ok(TargetList {
            text: text.trim().to_string(),
            specs: TargetSpec::parse_many(text)?,
        })
    }
}

impl fmt::Display for TargetList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An `--allow-failure` value (or a policy's `allow_failure` entry): `all`, a target or a group
/// of them (`qnn:all`), or a glob (`qnn:*`) or `/regex/` of target ids.
#[derive(Debug, Clone)]
pub struct TargetPattern {
    /// As written, for the report.
    pub text: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    All,
    Ids(Vec<String>),
    Pattern(crate::foundation::pattern::Pattern),
}

impl TargetPattern {
    /// Parses one pattern: a glob or regex when it has `*`, `?` or slashes, else `all` or a
    /// target spec (a typo is refused, not a pattern that silently names nothing).
    pub fn parse(text: &str) -> Result<TargetPattern> {
        let text = text.trim();
        let matcher = if text == "all" || text == "*" {
            Matcher::All
        } else if text.contains(['*', '?']) || (text.len() > 1 && text.starts_with('/') && text.ends_with('/')) {
            Matcher::Pattern(crate::foundation::pattern::Pattern::parse(text)?)
        } else {
            Matcher::Ids(TargetSpec::parse_many(text)?.into_iter().map(|s| s.id).collect())
        };
        Ok(TargetPattern {
            text: text.to_string(),
            matcher,
        })
    }

    /// The pattern that names every target.
    pub fn all() -> TargetPattern {
        TargetPattern {
            text: "all".into(),
            matcher: Matcher::All,
        }
    }

    /// Whether the pattern names the target `id`.
    pub fn names(&self, id: &str) -> bool {
        match &self.matcher {
            Matcher::All => true,
            Matcher::Ids(ids) => ids.iter().any(|i| i == id),
            Matcher::Pattern(p) => p.matches(id),
        }
    }
}

impl fmt::Display for TargetPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The targets of several `--target` values, groups expanded, repeats dropped, in order.
pub fn distinct(lists: &[TargetList]) -> Vec<TargetSpec> {
    let mut out: Vec<TargetSpec> = Vec::new();
    for spec in lists.iter().flat_map(|l| &l.specs) {
        if !out.iter().any(|s| s.id == spec.id) {
            out.push(spec.clone());
        }
    }
    out
}

/// A release: `all`, `X.Y.Z`, or (a plugin) `X.Y.Z+ortA.B.C`; versions are dotted numbers.
fn parse_release(text: &str, r: &str) -> Result<ReleaseSpec> {
    if r.eq_ignore_ascii_case("all") {
        return Ok(ReleaseSpec::All);
    }
    let dotted = |v: &str| {
        !v.is_empty()
            && v.split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    };
    let (version, host) = match r.split_once('+') {
        Some((v, h)) => (v, Some(h.strip_prefix("ort").unwrap_or(h))),
        None => (r, None),
    };
    if !dotted(version) || host.is_some_and(|h| !dotted(h)) {
        return Err(bad_flag(format!(
            "target '{text}': release '{r}' is not VERSION, all or PLUGIN+ortCORE (e.g. @2.6.0, @2.6.0+ort1.30.0)"
        )));
    }
    Ok(ReleaseSpec::Version {
        version: version.to_string(),
        host: host.map(str::to_string),
    })
}

/// The `,key=value` options of a target, checked.
fn parse_options<'t>(text: &str, parts: impl Iterator<Item = &'t str>) -> Result<Vec<(String, String)>> {
    let mut options: Vec<(String, String)> = Vec::new();
    for part in parts {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad_flag(format!("target '{text}': option '{part}' is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(bad_flag(format!("target '{text}': option '{part}' has an empty key")));
        }
        if options.iter().any(|(existing, _)| existing == k) {
            return Err(bad_flag(format!("target '{text}': option '{k}' is given twice")));
        }
        options.push((k.to_string(), v.to_string()));
    }
    Ok(options)
}

/// A target spec split into its parts, before its backend is known.
struct Parsed<'t> {
    text: &'t str,
    /// The kind, lowercase, aliases resolved (`htp` is `qnn`).
    kind: &'t str,
    variant: Option<&'t str>,
    options: Vec<(String, String)>,
}

impl Parsed<'_> {
    fn unknown(&self) -> anyhow::Error {
        bad_flag(format!("unknown target '{}' (known: {TARGET_SYNTAX})", self.text))
    }

    fn make(&self, backend: Backend, opt: OptLevel, variant_id: Option<String>) -> TargetSpec {
        let head = match &variant_id {
            Some(v) => format!("{}:{v}", self.kind),
            None => self.kind.to_string(),
        };
        TargetSpec {
            id: spec_id(head, &self.options),
            backend,
            opt,
            options: self.options.clone(),
            release: None,
        }
    }

    fn cpu(&self) -> Result<Vec<TargetSpec>> {
        let (opt, v) = match self.variant.map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("default") | Some("all") => (OptLevel::All, None),
            Some("noopt") | Some("disable") => (OptLevel::Disable, Some("noopt")),
            Some("basic") => (OptLevel::Basic, Some("basic")),
            Some("extended") => (OptLevel::Extended, Some("extended")),
            Some(_) => return Err(self.unknown()),
        };
        Ok(vec![self.make(Backend::Cpu, opt, v.map(str::to_string))])
    }

    /// `cpu-arm64[:CORE]`: the ARM64 CPU EP under emulation of one Arm core (default
    /// `cortex-a710`: i8mm and SVE2 at 128 bits; `docs/hosts.md` says which core stands for which phones).
    fn arm64(&self) -> Result<Vec<TargetSpec>> {
        let asked = self
            .variant
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_ARM_CORE)
            .to_ascii_lowercase();
        let Some(core) = arm_core(&asked) else {
            let known: Vec<&str> = ARM_CORES.iter().map(|c| c.id).collect();
            return Err(bad_flag(format!(
                "target '{}': unknown Arm core '{asked}' (known: {})",
                self.text,
                known.join(", ")
            )));
        };
        Ok(vec![self.make(
            Backend::Arm64 { core: core.id },
            OptLevel::All,
            Some(core.id.to_string()),
        )])
    }

    fn qnn(&self) -> Result<Vec<TargetSpec>> {
        let text = self.text;
        let Some(v) = self.variant.filter(|v| !v.is_empty()) else {
            return Err(bad_flag(format!(
                "target '{text}' needs a chipset: qnn:<chipset> (e.g. qnn:sm8650, qnn:\"8 Gen 3\") or qnn:all"
            )));
        };
        if let Some((k, _)) = self.options.iter().find(|(k, _)| k == "soc_model" || k == "htp_arch") {
            return Err(bad_flag(format!(
                "target '{text}': '{k}' is set by the chipset; choose the chipset with qnn:<chipset> instead"
            )));
        }
        if v.eq_ignore_ascii_case("all") {
            return Ok(CHIPSETS.iter().map(|c| qnn_spec(*c, &self.options)).collect());
        }
        let chip = Chipset::find(v).ok_or_else(|| {
            let known: Vec<_> = CHIPSETS.iter().map(|c| c.sm).collect();
            bad_flag(format!(
                "target '{text}': unknown Snapdragon chipset '{v}' (known: {})",
                known.join(", ")
            ))
        })?;
        Ok(vec![qnn_spec(chip, &self.options)])
    }

    fn openvino(&self) -> Result<Vec<TargetSpec>> {
        let device = self
            .variant
            .filter(|v| !v.is_empty())
            .unwrap_or("cpu")
            .to_ascii_lowercase();
        if !matches!(device.as_str(), "cpu" | "gpu" | "npu") {
            return Err(self.unknown());
        }
        let v = (device != "cpu").then(|| device.clone());
        let backend = Backend::OpenVino {
            device: device.to_ascii_uppercase(),
        };
        Ok(vec![self.make(backend, OptLevel::All, v)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> TargetSpec {
        let mut v = TargetSpec::parse_many(text).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    #[test]
    fn cpu_variants() {
        assert_eq!(one("cpu").opt, OptLevel::All);
        assert_eq!(one("cpu:noopt").opt, OptLevel::Disable);
        assert_eq!(one("cpu:noopt").id, "cpu:noopt");
        assert_eq!(one("CPU:basic").id, "cpu:basic");
    }

    #[test]
    fn qnn_chipsets_by_any_name_get_one_canonical_id() {
        assert_eq!(one("qnn:SM8650").id, "qnn:sm8650");
        assert_eq!(one("qnn:8 Gen 3").id, "qnn:sm8650");
        assert_eq!(one("qnn:8 Elite Gen 5").chipset().unwrap().soc_model, 87);
        let all = TargetSpec::parse_many("qnn:all").unwrap();
        assert_eq!(all.len(), CHIPSETS.len());
    }

    #[test]
    fn options_are_kept_in_the_id() {
        let t = one("qnn:sm8650,htp_performance_mode=burst");
        assert_eq!(t.id, "qnn:sm8650,htp_performance_mode=burst");
        assert_eq!(
            t.options,
            vec![("htp_performance_mode".to_string(), "burst".to_string())]
        );
    }

    #[test]
    fn bad_specs_are_usage_errors() {
        for bad in ["gpu", "qnn", "qnn:sm1234", "cpu:fast", "cpu,novalue", "openvino:tpu"] {
            let err = TargetSpec::parse_many(bad).unwrap_err();
            assert_eq!(
                crate::foundation::error::exit_code_of(&err),
                crate::foundation::error::ExitCode::Usage,
                "{bad}"
            );
        }
    }

    #[test]
    fn every_known_target_parses() {
        assert_eq!(all_known().len(), 2 + CHIPSETS.len() + 4);
    }

    #[test]
    fn options_added_later_give_the_id_the_text_would() {
        let base = one("qnn:sm8650@2.6.0,a=1");
        let more = base.with_options(&[("b".into(), "2".into())]).unwrap();
        assert_eq!(more, one("qnn:sm8650@2.6.0,a=1,b=2"));
        assert!(base.with_options(&[("soc_model".into(), "1".into())]).is_err());
        assert!(base.with_options(&[("a".into(), "2".into())]).is_err());
    }

    #[test]
    fn failure_patterns_name_ids_groups_and_globs() {
        let p = |t: &str| TargetPattern::parse(t).unwrap();
        assert!(p("all").names("qnn:sm8650@2.6.0"));
        assert!(p("qnn:all").names("qnn:sm8350") && !p("qnn:all").names("cpu"));
        assert!(p("qnn:8 Gen 3").names("qnn:sm8650") && !p("qnn:sm8650").names("qnn:sm8650@2.6.0"));
        assert!(p("qnn:sm8650@2.3.0*").names("qnn:sm8650@2.3.0+ort1.31.1"));
        assert!(p("/^cpu/").names("cpu:noopt"));
        assert!(TargetPattern::parse("openvinno").is_err());
        assert!(TargetPattern::parse("/(/").is_err());
    }

    #[test]
    fn repeats_are_dropped() {
        let v = parse_targets(&["cpu".into(), "qnn:sm8650".into(), "qnn:8 gen 3".into(), "cpu".into()]).unwrap();
        assert_eq!(
            v.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            vec!["cpu", "qnn:sm8650"]
        );
    }
}
