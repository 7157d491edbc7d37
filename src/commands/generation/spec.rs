//! A generation spec (`docs/generation.md`): which ONNX files make one autoregressive model, how
//! its decoding loop is fed, and which tokenizer turns its tokens into text. Everything in it is a
//! stranger's file: the TOML is read closed to unknown keys, every part is loaded and its inputs
//! and outputs checked against the layout before any session starts, and the tokenizer's
//! vocabulary against the logits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use crate::data::model::{load_model, Dim, LoadedModel, Signature};
use crate::foundation::error::bad_input;

/// How the model is split into parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// An encoder run once per sample and a decoder that attends to its output (Whisper).
    EncoderDecoder,
    /// One decoder fed the prompt, then its own tokens (an LLM).
    DecoderOnly,
}

impl Layout {
    /// The layout as the spec spells it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::EncoderDecoder => "encoder-decoder",
            Layout::DecoderOnly => "decoder-only",
        }
    }
}

/// How the decoder's key/value state is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// Optimum's export: the past grows by one position a step (shapes change every step).
    Dynamic,
    /// Fixed-length KV buffers with a mask and positions saying what is filled: the only form a
    /// compiler of static shapes (QNN) takes.
    Static,
}

impl Form {
    /// The form as the spec spells it.
    pub fn name(self) -> &'static str {
        match self {
            Form::Dynamic => "dynamic",
            Form::Static => "static",
        }
    }
}

/// A part of a spec, by what it does in the decoding loop; its name is its `[parts]` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartKind {
    /// Encoder-decoder: the encoder, run once per sample on its features (`encoder`).
    Encoder,
    /// Dynamic encoder-decoder: the decoder on the start tokens, with no past; once per sample
    /// (`decoder`).
    FirstDecoder,
    /// Dynamic encoder-decoder: the decoder on one token after its past; once per token
    /// (`decoder_with_past`).
    DecoderWithPast,
    /// Static encoder-decoder: the start tokens, their keys and values written into fresh
    /// buffers; once per sample (`prompt`).
    Prompt,
    /// Static form: one token on the fixed key/value buffers; once per token, a decoder-only
    /// model's prompt included (`step`).
    Step,
    /// Dynamic decoder-only: any number of tokens after a growing past, the prompt in one call
    /// and then once per token (`decoder`).
    Decoder,
    /// Static decoder-only with `prefill_length`: the prompt in chunks of that many tokens into
    /// the step's buffers, as a phone's prompt processor takes it (`prefill`).
    Prefill,
}

impl PartKind {
    /// The part's key in `[parts]`.
    pub fn name(self) -> &'static str {
        match self {
            PartKind::Encoder => "encoder",
            PartKind::FirstDecoder | PartKind::Decoder => "decoder",
            PartKind::DecoderWithPast => "decoder_with_past",
            PartKind::Prompt => "prompt",
            PartKind::Step => "step",
            PartKind::Prefill => "prefill",
        }
    }
}

impl std::fmt::Display for PartKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The TOML as written, before its files are opened.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    generation: GenerationTable,
    parts: BTreeMap<String, PartFiles>,
}

/// A part's file, or the files of a part split into several (run in order).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PartFiles {
    One(PathBuf),
    Chain(Vec<PathBuf>),
}

impl PartFiles {
    fn paths(&self) -> Vec<PathBuf> {
        match self {
            PartFiles::One(p) => vec![p.clone()],
            PartFiles::Chain(ps) => ps.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerationTable {
    layout: Layout,
    form: Form,
    tokenizer: PathBuf,
    #[serde(default)]
    start_tokens: Vec<String>,
    end_token: String,
    max_new_tokens: usize,
    #[serde(default)]
    kv_length: Option<usize>,
    #[serde(default)]
    suppress_tokens: Vec<u32>,
    #[serde(default)]
    suppress_at_start: Vec<u32>,
    #[serde(default)]
    reference: Option<PathBuf>,
    /// The `prefill` part's chunk length (static decoder-only).
    #[serde(default)]
    prefill_length: Option<usize>,
}

/// Checks a spec's text without opening the files it names: the TOML's keys, the parts its
/// layout needs, the static form's buffer length (what the docs' examples are held to).
pub fn check_text(text: &str) -> Result<(), String> {
    let file: SpecFile = toml::from_str(text).map_err(|e| e.message().trim().to_string())?;
    check_table(&file.generation, &file.parts)
}

/// The `[generation]` table's settings and the `[parts]` names agree with the layout and form.
fn check_table(g: &GenerationTable, parts: &BTreeMap<String, PartFiles>) -> Result<(), String> {
    let names: Vec<&str> = layout_parts(g).iter().map(|k| k.name()).collect();
    let layout_words = format!("{} {}", g.layout.name(), g.form.name());
    for name in parts.keys() {
        if !names.contains(&name.as_str()) {
            return Err(format!(
                "[parts] {name} is not a part of the {layout_words} layout (its parts: {})",
                names.join(", ")
            ));
        }
    }
    if let Some(missing) = names.iter().find(|n| !parts.contains_key(**n)) {
        return Err(format!(
            "[parts] needs {missing} (the {layout_words} layout's parts: {})",
            names.join(", ")
        ));
    }
    if let Some((name, _)) = parts
        .iter()
        .find(|(_, f)| matches!(f, PartFiles::Chain(c) if c.is_empty()))
    {
        return Err(format!("[parts] {name} is an empty list of files"));
    }
    if g.max_new_tokens == 0 {
        return Err("max_new_tokens must be at least 1".into());
    }
    check_prefill(g)?;
    match (g.form, g.kv_length) {
        (Form::Static, None) => Err("the static form needs kv_length (the slots of every KV buffer)".into()),
        (Form::Static, Some(0)) => Err("kv_length must be at least 1".into()),
        (Form::Dynamic, Some(_)) => Err("kv_length belongs to the static form: the dynamic form's past grows".into()),
        _ => Ok(()),
    }
}

/// A prefill chunk belongs to a static decoder-only spec, and its length divides the buffers.
fn check_prefill(g: &GenerationTable) -> Result<(), String> {
    let Some(n) = g.prefill_length else { return Ok(()) };
    if (g.layout, g.form) != (Layout::DecoderOnly, Form::Static) {
        return Err(
            "prefill_length belongs to a static decoder-only spec (its prefill part feeds the step's buffers)".into(),
        );
    }
    match g.kv_length {
        _ if n == 0 => Err("prefill_length must be at least 1".into()),
        Some(k) if k % n != 0 => Err(format!(
            "prefill_length {n} does not divide kv_length {k}: the prompt's chunks must tile the buffers"
        )),
        _ => Ok(()),
    }
}

/// The parts a spec's layout, form and prefill setting make it of, in the order they run.
fn layout_parts(g: &GenerationTable) -> Vec<PartKind> {
    let mut kinds = parts_of(g.layout, g.form).to_vec();
    if g.prefill_length.is_some() {
        kinds.insert(0, PartKind::Prefill);
    }
    kinds
}

/// The parts each layout and form is made of, in the order they run.
pub fn parts_of(layout: Layout, form: Form) -> &'static [PartKind] {
    use PartKind::*;
    match (layout, form) {
        (Layout::EncoderDecoder, Form::Dynamic) => &[Encoder, FirstDecoder, DecoderWithPast],
        (Layout::EncoderDecoder, Form::Static) => &[Encoder, Prompt, Step],
        (Layout::DecoderOnly, Form::Dynamic) => &[Decoder],
        (Layout::DecoderOnly, Form::Static) => &[Step],
    }
}

/// One file of a part: its path, the model loaded and its signature.
#[derive(Debug, Clone)]
pub struct PartFile {
    pub path: PathBuf,
    pub model: LoadedModel,
    pub signature: Signature,
}

impl PartFile {
    /// The file's name, for messages and reports.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }
}

/// One part: what it does, its files (one, or a chain run in order), and the signature of the
/// whole (the inputs no earlier file gives, every file's outputs).
#[derive(Debug, Clone)]
pub struct Part {
    pub kind: PartKind,
    pub files: Vec<PartFile>,
    pub signature: Signature,
}

impl Part {
    /// The file names of the part, for messages.
    pub fn file_names(&self) -> String {
        self.files.iter().map(PartFile::name).collect::<Vec<_>>().join(", ")
    }
}

/// The shape of the decoder's key/value state, read off the parts: what the loop builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads and head width of the decoder's self-attention state.
    pub heads: usize,
    pub head_dim: usize,
}

/// A generation spec, read and checked: its parts, the loop's tokens, the tokenizer.
pub struct GenerationSpec {
    pub path: PathBuf,
    pub layout: Layout,
    pub form: Form,
    pub parts: Vec<Part>,
    pub tokenizer_path: PathBuf,
    pub tokenizer: tokenizers::Tokenizer,
    /// The SHA-256 of the tokenizer file's bytes, as read.
    pub tokenizer_sha256: String,
    pub start_tokens: Vec<(String, u32)>,
    pub end_token: (String, u32),
    pub max_new_tokens: usize,
    pub kv_length: Option<usize>,
    pub suppress_tokens: Vec<u32>,
    pub suppress_at_start: Vec<u32>,
    /// The spec named as this one's fp32 reference (`None`: this spec is its own).
    pub reference: Option<PathBuf>,
    /// The `prefill` part's chunk length (`None`: the prompt goes through the step).
    pub prefill_length: Option<usize>,
    pub kv: KvShape,
    /// The logits' vocabulary size.
    pub vocab: usize,
}

impl std::fmt::Debug for GenerationSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationSpec")
            .field("path", &self.path)
            .field("layout", &self.layout)
            .field("form", &self.form)
            .finish_non_exhaustive()
    }
}

/// The most bytes a spec file may have: a spec is a few lines.
const MAX_SPEC_BYTES: u64 = 1 << 20;

impl GenerationSpec {
    /// Reads a spec and every file it names; each error is one line naming the spec and what in
    /// it is wrong.
    pub fn load(path: &Path) -> Result<GenerationSpec> {
        let shown = path.display().to_string();
        let bytes = read_small(path, MAX_SPEC_BYTES).map_err(|e| bad_input(format!("generation spec {shown}: {e}")))?;
        let text =
            String::from_utf8(bytes).map_err(|_| bad_input(format!("generation spec {shown}: not UTF-8 text")))?;
        let file: SpecFile = toml::from_str(&text).map_err(|e| {
            let what = e.message().trim().to_string();
            let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            bad_input(match line {
                Some(l) => format!("generation spec {shown}:{l}: {what}"),
                None => format!("generation spec {shown}: {what}"),
            })
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::from_file(path, &dir, file)
    }

    fn from_file(path: &Path, dir: &Path, file: SpecFile) -> Result<GenerationSpec> {
        let shown = path.display().to_string();
        let fail = |what: String| bad_input(format!("generation spec {shown}: {what}"));
        let g = file.generation;
        check_table(&g, &file.parts).map_err(fail)?;
        let mut parts = Vec::new();
        for kind in layout_parts(&g) {
            // check_table found every part of the layout named, and no other.
            let files = file.parts[kind.name()]
                .paths()
                .into_iter()
                .map(|p| load_file(&dir.join(p)).map_err(|e| fail(format!("part {kind}: {e}"))))
                .collect::<Result<Vec<_>>>()?;
            let signature = chain_signature(kind, &files).map_err(fail)?;
            parts.push(Part { kind, files, signature });
        }
        let tokenizer_path = dir.join(&g.tokenizer);
        let (tokenizer, tokenizer_sha256) = read_tokenizer(&tokenizer_path).map_err(fail)?;
        let id = |t: &str, key: &str| -> Result<(String, u32)> {
            tokenizer.token_to_id(t).map(|i| (t.to_string(), i)).ok_or_else(|| {
                fail(format!(
                    "{key} '{t}' is not in the tokenizer's vocabulary ({})",
                    tokenizer_path.display()
                ))
            })
        };
        let start_tokens = g
            .start_tokens
            .iter()
            .map(|t| id(t, "start token"))
            .collect::<Result<Vec<_>>>()?;
        if g.layout == Layout::EncoderDecoder && start_tokens.is_empty() {
            return Err(fail(
                "an encoder-decoder needs start_tokens: the decoder's prompt".into(),
            ));
        }
        let end_token = id(&g.end_token, "end_token")?;
        let mut spec = GenerationSpec {
            path: path.to_path_buf(),
            layout: g.layout,
            form: g.form,
            parts,
            tokenizer_path,
            tokenizer,
            tokenizer_sha256,
            start_tokens,
            end_token,
            max_new_tokens: g.max_new_tokens,
            kv_length: g.kv_length,
            suppress_tokens: g.suppress_tokens,
            suppress_at_start: g.suppress_at_start,
            reference: g.reference.map(|r| dir.join(r)),
            prefill_length: g.prefill_length,
            kv: KvShape {
                layers: 0,
                heads: 0,
                head_dim: 0,
            },
            vocab: 0,
        };
        spec.check_parts().map_err(fail)?;
        Ok(spec)
    }

    /// The part of this kind (every part of the layout is present once loaded).
    pub fn part(&self, kind: PartKind) -> &Part {
        self.parts
            .iter()
            .find(|p| p.kind == kind)
            .unwrap_or_else(|| panic!("part {kind} of a checked spec"))
    }

    /// The part of this kind, if the spec's layout has one.
    pub fn find_part(&self, kind: PartKind) -> Option<&Part> {
        self.parts.iter().find(|p| p.kind == kind)
    }

    /// The part that produces each step's logits (the one the per-layer audit of a step cuts).
    pub fn step_part(&self) -> &Part {
        self.part(self.step_kind())
    }

    /// The kind of the part called once per new token.
    pub fn step_kind(&self) -> PartKind {
        match (self.layout, self.form) {
            (Layout::EncoderDecoder, Form::Dynamic) => PartKind::DecoderWithPast,
            (Layout::DecoderOnly, Form::Dynamic) => PartKind::Decoder,
            (_, Form::Static) => PartKind::Step,
        }
    }

    /// The kind of the part that starts a sample's decoder after the encoder (an
    /// encoder-decoder's).
    pub fn first_decoder_kind(&self) -> PartKind {
        match self.form {
            Form::Dynamic => PartKind::FirstDecoder,
            Form::Static => PartKind::Prompt,
        }
    }

    /// The input the samples of an eval set feed: the encoder's features or the prompt's ids.
    pub fn sample_input(&self) -> &str {
        match self.layout {
            Layout::EncoderDecoder => "input_features",
            Layout::DecoderOnly => "input_ids",
        }
    }

    /// Every file the spec reads: itself, the parts (with external data) and the tokenizer.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.path.clone(), self.tokenizer_path.clone()];
        for f in self.parts.iter().flat_map(|p| &p.files) {
            files.push(f.path.clone());
            files.extend(f.model.external_data_paths());
        }
        files
    }

    /// Checks every part against its layout's names and the parts against each other: one KV
    /// state shape, one vocabulary, and the tokenizer's ids within the logits.
    fn check_parts(&mut self) -> Result<(), String> {
        let step = self.step_part();
        let logits = output(step, "logits")?;
        let vocab = last_fixed(&logits.dims)
            .ok_or_else(|| format!("part {}: logits has no fixed vocabulary axis", step.kind))?;
        let self_kv = if self.layout == Layout::EncoderDecoder {
            ".decoder.key"
        } else {
            ".key"
        };
        let layers = step
            .signature
            .inputs
            .iter()
            .filter(|i| i.name.starts_with("past_key_values.") && i.name.ends_with(self_kv))
            .count();
        if layers == 0 {
            return Err(format!(
                "part {}: no past_key_values.N{self_kv} input: not a decoder with a KV state",
                step.kind
            ));
        }
        let first = input(step, &format!("past_key_values.0{self_kv}"))?;
        let dims = fixed_dims(&first.dims);
        let (heads, head_dim) = match dims.as_slice() {
            [_, Some(h), _, Some(d)] => (*h, *d),
            _ => {
                return Err(format!(
                    "part {}: past_key_values.0{self_kv} is {}: a KV state needs fixed heads and head width [batch, heads, positions, width]",
                    step.kind,
                    first.shape_text()
                ))
            }
        };
        self.kv = KvShape {
            layers,
            heads,
            head_dim,
        };
        self.vocab = vocab;
        self.check_names()?;
        self.check_agreement()?;
        self.check_wiring()?;
        self.check_static_length()?;
        let tokenizer_size = self.tokenizer.get_vocab_size(true);
        let ids = self
            .start_tokens
            .iter()
            .chain(std::iter::once(&self.end_token))
            .map(|(_, i)| *i)
            .chain(self.suppress_tokens.iter().copied())
            .chain(self.suppress_at_start.iter().copied());
        for id in ids {
            if id as usize >= vocab {
                return Err(format!(
                    "token id {id} is outside the model's {vocab} logits (the tokenizer has {tokenizer_size} tokens): this tokenizer is not the model's"
                ));
            }
        }
        if tokenizer_size > vocab + 1024 || vocab > tokenizer_size + 1024 {
            return Err(format!(
                "the tokenizer has {tokenizer_size} tokens and the model's logits {vocab}: this tokenizer is not the model's"
            ));
        }
        Ok(())
    }

    /// Every part has the inputs and outputs its role in the loop needs, KV names for every layer.
    fn check_names(&self) -> Result<(), String> {
        let l = self.kv.layers;
        let kv = |prefix: &str, kind: &str| -> Vec<String> {
            (0..l)
                .flat_map(|n| ["key", "value"].map(|kv| format!("{prefix}.{n}{kind}.{kv}")))
                .collect()
        };
        let need = |part: PartKind, ins: Vec<String>, outs: Vec<String>| -> Result<(), String> {
            let p = self.part(part);
            for i in &ins {
                input(p, i)?;
            }
            // Every input the part takes is one the loop feeds (a dynamic decoder's positions
            // are optional): any other is a tensor no file of the chain gives.
            let optional = part == PartKind::Decoder;
            if let Some(extra) = p
                .signature
                .inputs
                .iter()
                .find(|i| !(ins.contains(&i.name) || optional && i.name == "position_ids"))
            {
                let file = p
                    .files
                    .iter()
                    .find(|f| f.signature.inputs.iter().any(|i| i.name == extra.name))
                    .map_or_else(String::new, PartFile::name);
                return Err(format!(
                    "part {part}: {file} takes {}, which neither the loop feeds the part nor an earlier file of it gives",
                    extra.name
                ));
            }
            for o in &outs {
                output(p, o)?;
            }
            Ok(())
        };
        let v = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cat = |mut a: Vec<String>, b: Vec<String>| {
            a.extend(b);
            a
        };
        match self.layout {
            Layout::EncoderDecoder => {
                need(PartKind::Encoder, v(&["input_features"]), v(&["last_hidden_state"]))?;
                let first_outs = cat(
                    cat(v(&["logits"]), kv("present", ".decoder")),
                    kv("present", ".encoder"),
                );
                need(
                    self.first_decoder_kind(),
                    v(&["input_ids", "encoder_hidden_states"]),
                    first_outs,
                )?;
                let mut ins = cat(
                    cat(v(&["input_ids"]), kv("past_key_values", ".decoder")),
                    kv("past_key_values", ".encoder"),
                );
                if self.form == Form::Static {
                    ins.extend(v(&["position_ids", "attention_mask"]));
                }
                need(self.step_kind(), ins, cat(v(&["logits"]), kv("present", ".decoder")))
            }
            Layout::DecoderOnly => {
                let mut ins = cat(v(&["input_ids", "attention_mask"]), kv("past_key_values", ""));
                if self.form == Form::Static {
                    ins.push("position_ids".into());
                }
                if self.prefill_length.is_some() {
                    need(PartKind::Prefill, ins.clone(), cat(v(&["logits"]), kv("present", "")))?;
                }
                need(self.step_kind(), ins, cat(v(&["logits"]), kv("present", "")))
            }
        }
    }

    /// Every part's logits have the step's vocabulary, and every self-attention key and value
    /// they take or give has the step's heads and width (where the part fixes them).
    fn check_agreement(&self) -> Result<(), String> {
        let kind = if self.layout == Layout::EncoderDecoder {
            ".decoder."
        } else {
            "."
        };
        for p in &self.parts {
            for o in p.signature.outputs.iter().filter(|o| o.name == "logits") {
                if let Some(v) = last_fixed(&o.dims).filter(|v| *v != self.vocab) {
                    return Err(format!(
                        "part {}'s logits have {v} entries and part {}'s {}: the parts disagree",
                        p.kind,
                        self.step_kind(),
                        self.vocab
                    ));
                }
            }
            let kv = p.signature.inputs.iter().chain(&p.signature.outputs).filter(|t| {
                (t.name.starts_with("past_key_values.") || t.name.starts_with("present."))
                    && t.name.contains(kind)
                    && !t.name.contains(".encoder.")
            });
            for t in kv {
                let dims = fixed_dims(&t.dims);
                let fits = dims.len() == 4
                    && dims[1].is_none_or(|h| h == self.kv.heads)
                    && dims[3].is_none_or(|d| d == self.kv.head_dim);
                if !fits {
                    return Err(format!(
                        "part {}'s {} is {}, where the step's state is [batch, {}, positions, {}]: the parts disagree",
                        p.kind,
                        t.name,
                        t.shape_text(),
                        self.kv.heads,
                        self.kv.head_dim
                    ));
                }
            }
        }
        Ok(())
    }

    /// What one part hands the next meets it: an encoder-decoder's encoder output and the
    /// decoder input it feeds, the cross-attention keys and values the first decoder part gives
    /// and the step takes, and (dynamic form) its self-attention state, every axis both fix
    /// (but the positions a dynamic past grows by). Parts of two models fail here, before any
    /// session starts.
    fn check_wiring(&self) -> Result<(), String> {
        if self.layout != Layout::EncoderDecoder {
            return Ok(());
        }
        let (encoder, first, step) = (
            self.part(PartKind::Encoder),
            self.part(self.first_decoder_kind()),
            self.step_part(),
        );
        meet((encoder, "last_hidden_state"), (first, "encoder_hidden_states"), None)?;
        for n in 0..self.kv.layers {
            for kv in ["key", "value"] {
                let cross = (
                    format!("present.{n}.encoder.{kv}"),
                    format!("past_key_values.{n}.encoder.{kv}"),
                );
                meet((first, &cross.0), (step, &cross.1), None)?;
                if self.form == Form::Dynamic {
                    let own = (
                        format!("present.{n}.decoder.{kv}"),
                        format!("past_key_values.{n}.decoder.{kv}"),
                    );
                    meet((first, &own.0), (step, &own.1), Some(2))?;
                }
            }
        }
        Ok(())
    }

    /// A static step's buffers are `kv_length` long, as the spec says, and hold the start tokens
    /// and every new token but the last.
    fn check_static_length(&self) -> Result<(), String> {
        let Some(k) = self.kv_length else { return Ok(()) };
        let step = self.step_part();
        let name = if self.layout == Layout::EncoderDecoder {
            "past_key_values.0.decoder.key"
        } else {
            "past_key_values.0.key"
        };
        let dims = fixed_dims(&input(step, name)?.dims);
        if dims.get(2).copied().flatten() != Some(k) {
            return Err(format!(
                "kv_length is {k} and part step's {name} is {}: they must agree",
                input(step, name)?.shape_text()
            ));
        }
        if let Some(n) = self.prefill_length {
            self.check_prefill_shapes(n, k)?;
        }
        let needed = self.start_tokens.len() + self.max_new_tokens - 1;
        if self.layout == Layout::EncoderDecoder && needed > k {
            return Err(format!(
                "kv_length {k} cannot hold {} start tokens and {} new tokens (needs {needed})",
                self.start_tokens.len(),
                self.max_new_tokens
            ));
        }
        Ok(())
    }

    /// A prefill part takes chunks of `n` tokens over buffers of `k` slots: `input_ids` and
    /// `position_ids` [1, n], `attention_mask` [1, k + n], the past [1, heads, k, width], and it
    /// gives the chunk's keys and values [1, heads, n, width] (each axis the part fixes).
    fn check_prefill_shapes(&self, n: usize, k: usize) -> Result<(), String> {
        let p = self.part(PartKind::Prefill);
        let (h, d) = (self.kv.heads, self.kv.head_dim);
        let mut want: Vec<(String, bool, Vec<usize>)> = vec![
            ("input_ids".into(), true, vec![1, n]),
            ("position_ids".into(), true, vec![1, n]),
            ("attention_mask".into(), true, vec![1, k + n]),
        ];
        for l in 0..self.kv.layers {
            for kv in ["key", "value"] {
                want.push((format!("past_key_values.{l}.{kv}"), true, vec![1, h, k, d]));
                want.push((format!("present.{l}.{kv}"), false, vec![1, h, n, d]));
            }
        }
        for (name, is_input, dims) in want {
            let t = if is_input { input(p, &name)? } else { output(p, &name)? };
            let fixed = fixed_dims(&t.dims);
            let fits = fixed.len() == dims.len() && fixed.iter().zip(&dims).all(|(f, d)| f.is_none_or(|f| f == *d));
            if !fits {
                return Err(format!(
                    "part prefill's {name} is {}, where prefill_length {n} and kv_length {k} make it {dims:?}",
                    t.shape_text()
                ));
            }
        }
        Ok(())
    }

    /// The text of tokens, special tokens skipped, as the tokenizer decodes it.
    pub fn text(&self, tokens: &[u32]) -> String {
        match quietly(|| self.tokenizer.decode(tokens, true)) {
            Some(Ok(text)) => text,
            Some(Err(e)) => format!("<undecodable: {e}>"),
            None => "<undecodable>".into(),
        }
    }

    /// One token as the tokenizer spells it (special tokens included), for "where it departed".
    pub fn token_text(&self, token: u32) -> String {
        self.tokenizer
            .id_to_token(token)
            .map(|t| {
                quietly(|| self.tokenizer.decode(&[token], false))
                    .and_then(Result::ok)
                    .filter(|d| !d.is_empty())
                    .unwrap_or(t)
            })
            .unwrap_or_else(|| format!("#{token}"))
    }
}

/// A regular file's bytes, at most `max` of them.
fn read_small(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    crate::foundation::userfile::regular_file(path)?;
    crate::foundation::userfile::read_capped(path, max)
}

/// The tokenizer a spec names, and the SHA-256 of its bytes.
fn read_tokenizer(path: &Path) -> Result<(tokenizers::Tokenizer, String), String> {
    let bytes = read_small(path, 256 << 20).map_err(|e| format!("tokenizer {}: {e}", path.display()))?;
    let sha256 = crate::foundation::hash::sha256_hex(&bytes);
    let tokenizer = tokenizer_from_bytes(bytes).map_err(|e| format!("tokenizer {}: {e}", path.display()))?;
    Ok((tokenizer, sha256))
}

/// A stranger's `tokenizer.json` parsed, or why not in one line. The `tokenizers` crate panics on
/// some malformed files (an `unwrap` in its decoder's deserializer, found by fuzzing): such a
/// file is refused like any other.
pub fn tokenizer_from_bytes(bytes: Vec<u8>) -> Result<tokenizers::Tokenizer, String> {
    match quietly(|| tokenizers::Tokenizer::from_bytes(bytes)) {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => {
            let text = e.to_string();
            Err(format!(
                "not a tokenizers JSON file: {}",
                text.lines().next().unwrap_or("unreadable")
            ))
        }
        None => Err("not a tokenizers JSON file: the tokenizers library could not read it".into()),
    }
}

/// `f`'s value, or `None` when it panicked; the panic is not printed. For calls into the
/// `tokenizers` crate on a stranger's file, made while no other thread of the audit runs.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    result.ok()
}

fn input<'a>(p: &'a Part, name: &str) -> Result<&'a crate::data::model::TensorInfo, String> {
    find(p, &p.signature.inputs, "input", name)
}

fn output<'a>(p: &'a Part, name: &str) -> Result<&'a crate::data::model::TensorInfo, String> {
    find(p, &p.signature.outputs, "output", name)
}

/// The tensor `name` among a part's inputs or outputs (`side`), or the one line that lists them.
fn find<'a>(
    p: &'a Part,
    tensors: &'a [crate::data::model::TensorInfo],
    side: &str,
    name: &str,
) -> Result<&'a crate::data::model::TensorInfo, String> {
    tensors.iter().find(|t| t.name == name).ok_or_else(|| {
        format!(
            "part {} ({}) has no {side} {name} (its {side}s: {})",
            p.kind,
            p.file_names(),
            crate::foundation::words::listed(&tensors.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), 8)
        )
    })
}

/// One file of a part, loaded, with its signature; an error is one line.
fn load_file(path: &Path) -> Result<PartFile, String> {
    let model = load_model(path).map_err(|e| crate::foundation::error::one_line(&e))?;
    let signature = Signature::of(&model).map_err(|e| crate::foundation::error::one_line(&e))?;
    Ok(PartFile {
        path: path.to_path_buf(),
        model,
        signature,
    })
}

/// The signature of a part of `files` run in order: the inputs no earlier file gives (the
/// part's own), every file's outputs. A file input an earlier file gives must have its shape
/// where both fix it; two files giving one output is refused.
fn chain_signature(kind: PartKind, files: &[PartFile]) -> Result<Signature, String> {
    let mut inputs: Vec<crate::data::model::TensorInfo> = Vec::new();
    let mut outputs: Vec<crate::data::model::TensorInfo> = Vec::new();
    for f in files {
        for i in &f.signature.inputs {
            match outputs.iter().find(|o| o.name == i.name) {
                Some(o) if !same_fixed(&o.dims, &i.dims) => {
                    return Err(format!(
                        "part {kind}: {} takes {} as {} and an earlier file gives it as {}",
                        f.name(),
                        i.name,
                        i.shape_text(),
                        o.shape_text()
                    ))
                }
                Some(_) => {}
                None if !inputs.iter().any(|x| x.name == i.name) => inputs.push(i.clone()),
                None => {}
            }
        }
        for o in &f.signature.outputs {
            if outputs.iter().any(|x| x.name == o.name) {
                return Err(format!(
                    "part {kind}: {} gives {}, which an earlier file gives",
                    f.name(),
                    o.name
                ));
            }
            outputs.push(o.clone());
        }
    }
    Ok(Signature {
        inputs,
        outputs,
        softmax_axes: files[0].signature.softmax_axes.clone(),
    })
}

/// Whether two shapes agree on every axis both fix (and have one rank when both are known).
fn same_fixed(a: &Option<Vec<Dim>>, b: &Option<Vec<Dim>>) -> bool {
    let (x, y) = (fixed_dims(a), fixed_dims(b));
    a.is_none()
        || b.is_none()
        || (x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| p.is_none() || q.is_none() || p == q))
}

/// Output `from` of one part has the rank and the fixed axes of input `to` of another (but axis
/// `free`, which may differ).
fn meet(from: (&Part, &str), to: (&Part, &str), free: Option<usize>) -> Result<(), String> {
    let (out, inp) = (output(from.0, from.1)?, input(to.0, to.1)?);
    let (a, b) = (fixed_dims(&out.dims), fixed_dims(&inp.dims));
    let clash = a.len() != b.len()
        || a.iter()
            .zip(&b)
            .enumerate()
            .any(|(axis, (x, y))| Some(axis) != free && x.is_some() && y.is_some() && x != y);
    if clash && out.dims.is_some() && inp.dims.is_some() {
        return Err(format!(
            "part {}'s {} is {} and part {}'s {} is {}: the parts are not of one model",
            from.0.kind,
            from.1,
            out.shape_text(),
            to.0.kind,
            to.1,
            inp.shape_text()
        ));
    }
    Ok(())
}

fn fixed_dims(dims: &Option<Vec<Dim>>) -> Vec<Option<usize>> {
    dims.as_ref()
        .map(|d| {
            d.iter()
                .map(|x| match x {
                    Dim::Fixed(n) => Some(*n),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn last_fixed(dims: &Option<Vec<Dim>>) -> Option<usize> {
    fixed_dims(dims).last().copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATIC: &str = r#"
[generation]
layout = "encoder-decoder"
form = "static"
tokenizer = "t.json"
start_tokens = ["<s>"]
end_token = "</s>"
max_new_tokens = 4
kv_length = 8
[parts]
encoder = "e.onnx"
prompt = "p.onnx"
step = "s.onnx"
"#;

    #[test]
    fn a_spec_names_exactly_its_layouts_parts() {
        assert_eq!(check_text(STATIC), Ok(()));
        let dynamic_part = STATIC.replace("prompt = ", "decoder = ");
        let e = check_text(&dynamic_part).unwrap_err();
        assert!(
            e.contains("[parts] decoder is not a part of the encoder-decoder static layout"),
            "{e}"
        );
        let missing = STATIC.replace("step = \"s.onnx\"\n", "");
        assert!(check_text(&missing).unwrap_err().contains("[parts] needs step"));
    }

    #[test]
    fn the_static_form_and_only_it_has_a_buffer_length() {
        let e = check_text(&STATIC.replace("kv_length = 8\n", "")).unwrap_err();
        assert!(e.contains("needs kv_length"), "{e}");
        let dynamic = STATIC
            .replace("form = \"static\"", "form = \"dynamic\"")
            .replace("prompt = ", "decoder = ")
            .replace("step = ", "decoder_with_past = ");
        assert!(check_text(&dynamic)
            .unwrap_err()
            .contains("kv_length belongs to the static form"));
        assert!(check_text(&STATIC.replace("max_new_tokens = 4", "max_new_tokens = 0"))
            .unwrap_err()
            .contains("at least 1"));
    }

    #[test]
    fn unknown_keys_and_layouts_are_refused() {
        assert!(check_text(&STATIC.replace("end_token", "end_tokn")).is_err());
        assert!(check_text(&STATIC.replace("encoder-decoder", "seq2seq")).is_err());
        assert!(check_text("[generation]\n").is_err());
    }
}
