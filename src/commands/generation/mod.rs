//! `npu-audit eval SPEC.toml --task transcribe|generate|score`: an autoregressive model (a speech
//! recognizer, an LLM) decoded on every target with its own tokens fed back, against the fp32
//! reference's decode on the CPU EP, or (`score`) a text's windows fed teacher-forced. Each
//! target runs in its own worker processes, one warm serving session per file of each part (the
//! encoder, the prefill, the step), and the loop that feeds them runs here, so the key/value
//! state crosses a pipe, never a file. The figures: where each target's text first departs and
//! what that costs in words, and, with the reference's tokens forced from there on, how each
//! step's logits drift; for a corpus, llama.cpp's KLD, same top token and perplexity.

pub mod assemble;
pub mod decode;
pub mod explain;
pub mod figures;
pub mod score;
mod sessions;
pub mod spec;
pub mod sweep;

use std::path::PathBuf;

use anyhow::Result;

use crate::analyses::accuracy::StatOptions;
use crate::commands::eval::DatasetOptions;
use crate::data::dataset::Dataset;
use crate::data::model::{Dim, Signature, TensorInfo};
use crate::data::target::{TargetPattern, TargetSpec};
use crate::data::tensor::{DType, Tensor};
use crate::execution::exec::ExecOptions;
use crate::foundation::error::{bad_flag, bad_input};
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::foundation::words::count;
use crate::judge::policy::Policy;
pub use crate::report::generation::GenerationTask;
use crate::report::generation::{GenerationReport, PromptCut};
use spec::{GenerationSpec, Layout};

/// Everything a generation audit was asked to do.
#[derive(Debug, Clone)]
pub struct GenerationOptions {
    pub spec: PathBuf,
    pub task: GenerationTask,
    pub dataset: DatasetOptions,
    /// The targets asked for (`None`: every target this machine can run).
    pub targets: Option<Vec<TargetSpec>>,
    pub allow_failure: Vec<TargetPattern>,
    /// Add the `cpu:noopt` baseline.
    pub baseline: bool,
    pub exec: ExecOptions,
    pub policy: Policy,
    /// The bootstrap's seed and resamples.
    pub stats: StatOptions,
    /// `--explain K`: the per-layer audit of up to K samples per target at their first divergence.
    pub explain: usize,
    /// `--prompt-lengths`: each sample cut to its first L prompt tokens for every L here (sorted,
    /// distinct; empty: no sweep).
    pub prompt_lengths: Vec<usize>,
}

impl Reads for GenerationOptions {
    fn declare(&self, set: &mut InputFiles) {
        let GenerationOptions {
            spec,
            task: _,
            dataset,
            targets: _,
            allow_failure: _,
            baseline: _,
            exec,
            policy,
            stats: _,
            explain: _,
            prompt_lengths: _,
        } = self;
        set.add(spec).with(exec).with(policy);
        set.add(&dataset.path).add_all(&dataset.labels);
    }
}

/// The spec audited and the fp32 spec it is compared with (the same one when it names none).
pub struct Specs {
    pub audited: GenerationSpec,
    pub reference: Option<GenerationSpec>,
}

impl Specs {
    /// The reference spec: the one named, or the audited spec itself.
    pub fn reference(&self) -> &GenerationSpec {
        self.reference.as_ref().unwrap_or(&self.audited)
    }
}

/// Reads the audited spec and its reference and checks that they decode alike: the same
/// tokenizer, start and end tokens, limit and suppressed tokens, so that any difference in their
/// tokens comes from the models.
pub fn load_specs(path: &std::path::Path) -> Result<Specs> {
    let audited = GenerationSpec::load(path)?;
    let reference = match &audited.reference {
        Some(r) => Some(GenerationSpec::load(r)?),
        None => None,
    };
    if let Some(r) = &reference {
        let differences = [
            ("tokenizer", audited.tokenizer_sha256 != r.tokenizer_sha256),
            ("start_tokens", audited.start_tokens != r.start_tokens),
            ("end_token", audited.end_token != r.end_token),
            ("max_new_tokens", audited.max_new_tokens != r.max_new_tokens),
            ("suppress_tokens", audited.suppress_tokens != r.suppress_tokens),
            ("suppress_at_start", audited.suppress_at_start != r.suppress_at_start),
            ("the vocabulary size of the logits", audited.vocab != r.vocab),
            ("layout", audited.layout != r.layout),
        ];
        if let Some((what, _)) = differences.iter().find(|(_, differs)| *differs) {
            return Err(bad_input(format!(
                "generation spec {}: its reference {} has another {what}: the two must decode alike",
                path.display(),
                r.path.display()
            )));
        }
    }
    Ok(Specs { audited, reference })
}

/// What the set's samples feed: the encoder's features, or a prompt's ids of any length.
fn sample_signature(spec: &GenerationSpec) -> Signature {
    let input = match spec.layout {
        Layout::EncoderDecoder => spec
            .part(spec::PartKind::Encoder)
            .signature
            .inputs
            .iter()
            .find(|i| i.name == "input_features")
            .cloned()
            .unwrap_or_else(|| TensorInfo {
                name: "input_features".into(),
                dtype: DType::Float32,
                dims: None,
            }),
        Layout::DecoderOnly => TensorInfo {
            name: "input_ids".into(),
            dtype: DType::Int64,
            dims: Some(vec![Dim::Fixed(1), Dim::Dynamic(Some("prompt".into()))]),
        },
    };
    Signature {
        inputs: vec![input],
        outputs: Vec::new(),
        softmax_axes: Default::default(),
    }
}

/// One sample as decoded: its id, label and the tensor it feeds, and for a prompt-length sweep
/// the set's sample it was cut from.
pub struct GenSample {
    pub id: String,
    pub label: Option<String>,
    pub input: Tensor,
    pub cut: Option<PromptCut>,
}

/// The set, every sample read (a sample is one utterance's features or one prompt).
fn read_set(opts: &GenerationOptions, specs: &Specs) -> Result<(Dataset, Vec<GenSample>)> {
    let spec = &specs.audited;
    let d = &opts.dataset;
    let dataset = Dataset::open(&d.path, d.labels.as_deref(), d.limit)?;
    if opts.task == GenerationTask::Transcribe && dataset.labels.is_none() {
        return Err(bad_input(format!(
            "--dataset {}: --task transcribe needs labels (the spoken text, in labels.csv); without labels, --task generate",
            d.path.display()
        )));
    }
    if dataset.is_empty() {
        return Err(bad_input(format!("--dataset {}: no samples", d.path.display())));
    }
    let sig = sample_signature(spec);
    match spec.layout {
        Layout::EncoderDecoder => dataset.check(&sig)?,
        Layout::DecoderOnly => dataset.check_ragged(&sig)?,
    }
    let mut samples = Vec::with_capacity(dataset.len());
    let mut longest = 0;
    for (k, sample) in dataset.samples(&sig, 0)?.enumerate() {
        let sample = sample?;
        let input = sample
            .inputs
            .into_iter()
            .find(|(n, _)| n == spec.sample_input())
            .map(|(_, t)| t)
            .ok_or_else(|| {
                bad_input(format!(
                    "--dataset {}: sample {} has no {}",
                    d.path.display(),
                    sample.id,
                    spec.sample_input()
                ))
            })?;
        let label = dataset.labels.as_ref().map(|l| l[k].to_string());
        longest = longest.max(input.len());
        let read = GenSample {
            id: sample.id,
            label,
            input,
            cut: None,
        };
        for s in sweep::cuts(read, &opts.prompt_lengths) {
            if spec.layout == Layout::DecoderOnly {
                check_prompt(spec, &s.input, opts.task)
                    .and_then(|()| check_prompt(specs.reference(), &s.input, opts.task))
                    .map_err(|e| bad_input(format!("--dataset {}: sample {}: {e}", d.path.display(), s.id)))?;
            }
            samples.push(s);
        }
    }
    sweep::check_lengths(&opts.prompt_lengths, longest, &d.path)?;
    Ok((dataset, samples))
}

/// A prompt's ids are tokens of the model's vocabulary, and with the start tokens and every new
/// token but the last they fit a static spec's KV buffers; a window to score has two tokens or
/// more (each position is held to the token after it) and fits them with the start tokens.
fn check_prompt(spec: &GenerationSpec, input: &Tensor, task: GenerationTask) -> Result<(), String> {
    let ids = decode::prompt_ids(input);
    if ids.len() != input.len() {
        return Err("input_ids holds a value that is not a token id".into());
    }
    if let Some(bad) = ids.iter().find(|&&i| i < 0 || i as usize >= spec.vocab) {
        return Err(format!("token id {bad} is outside the model's {} logits", spec.vocab));
    }
    let scoring = task == GenerationTask::Score;
    if scoring && ids.len() < 2 {
        return Err(format!(
            "a window of {} scores nothing: --task score needs windows of 2 tokens or more (each position's logits are held to the token after it)",
            count(ids.len(), "token")
        ));
    }
    let new = if scoring { 0 } else { spec.max_new_tokens - 1 };
    let needed = spec.start_tokens.len() + ids.len() + new;
    match spec.kv_length {
        Some(k) if needed > k && scoring => Err(format!(
            "its {} tokens and {} start tokens need {needed} KV slots; kv_length is {k}: cut the text into shorter windows (scripts/text-set --window)",
            ids.len(),
            spec.start_tokens.len()
        )),
        Some(k) if needed > k => Err(format!(
            "its {} prompt tokens, {} start tokens and {} new tokens need {needed} KV slots; kv_length is {k}",
            ids.len(),
            spec.start_tokens.len(),
            spec.max_new_tokens
        )),
        _ if spec.start_tokens.is_empty() && ids.is_empty() => {
            Err("the prompt is empty and the spec has no start tokens".into())
        }
        _ => Ok(()),
    }
}

/// What the task asks of the spec and the flags: `score` reads a decoder-only spec's windows, and
/// has nothing to explain (no divergent step) and no labels.
fn check_task(opts: &GenerationOptions, spec: &GenerationSpec) -> Result<()> {
    if !opts.prompt_lengths.is_empty() && (opts.task != GenerationTask::Generate || spec.layout != Layout::DecoderOnly)
    {
        return Err(bad_flag(
            "--prompt-lengths sweeps a decoder-only spec's prompts under --task generate",
        ));
    }
    if opts.task != GenerationTask::Score {
        return Ok(());
    }
    if spec.layout != Layout::DecoderOnly {
        return Err(bad_input(format!(
            "{}: --task score scores a decoder-only spec's windows of text; this spec is {}",
            opts.spec.display(),
            spec.layout.name()
        )));
    }
    if opts.explain > 0 {
        return Err(bad_flag(
            "--explain is for --task generate and transcribe (the part call at a divergence); --task score has no divergence to explain",
        ));
    }
    if opts.dataset.labels.is_some() {
        return Err(bad_flag(
            "--labels is for --task generate and transcribe; --task score scores each window against its own next tokens",
        ));
    }
    Ok(())
}

/// Runs the audit: the reference decodes every sample, every target decodes it with its own
/// tokens, and the report states where they part.
pub fn run(opts: &GenerationOptions, outputs: &mut Outputs) -> Result<GenerationReport> {
    if opts.stats.sequential.is_some() {
        return Err(bad_flag(
            "--until-decided is not for generation: every sample is decoded",
        ));
    }
    let specs = load_specs(&opts.spec)?;
    check_task(opts, &specs.audited)?;
    let mut files = specs.audited.files();
    if let Some(r) = &specs.reference {
        files.extend(r.files());
    }
    outputs.add_inputs(InputFiles::new().add_all(&files));
    let (dataset, samples) = read_set(opts, &specs)?;
    if opts.task == GenerationTask::Score {
        let work = score::Score {
            audited: &specs.audited,
            reference: specs.reference(),
        };
        let read = sessions::run_all(opts, &specs, &samples, &work)?;
        crate::foundation::interrupt::check()?;
        return Ok(score::report(opts, &specs, &dataset, &samples, read));
    }
    let work = figures::Decode {
        audited: &specs.audited,
        reference: specs.reference(),
    };
    let decoded = sessions::run_all(opts, &specs, &samples, &work)?;
    crate::foundation::interrupt::check()?;
    let explanations: Vec<Vec<_>> = decoded
        .targets
        .iter()
        .map(|t| {
            t.divergent_calls
                .iter()
                .map(|c| (c.sample, explain::explain(opts, &specs, &t.planned, c)))
                .collect()
        })
        .collect();
    crate::foundation::interrupt::check()?;
    Ok(assemble::report(
        opts,
        &specs,
        &dataset,
        &samples,
        decoded,
        &explanations,
    ))
}
