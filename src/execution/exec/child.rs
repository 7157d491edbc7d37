//! The worker side: a child process of the tool that loads one ONNX Runtime build, creates one
//! session for one target, runs every sample and writes the outputs. Anything that goes wrong
//! inside ONNX Runtime stays inside this process.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use ort::environment::Environment;
use ort::logging::LogLevel;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor as OrtTensor, TensorElementType, ValueType};

use super::context_cache::{self, JobCache, SessionRecord};
use super::job::{ContextUse, EpSetup, Job, JobResult, OutputFile, OutputType, Phase, RepeatDifference, QNN_EP};
use crate::data::target::OptLevel;
use crate::data::tensor::{Tensor, TensorData};
use crate::execution::runtime::contexts::{Entry, Lookup};

/// Runs the job described by `job_path` and writes `result.json` beside its outputs. Returns the
/// process exit code: 0 whenever a result was written, even for a failed target.
pub fn run(job_path: &Path, serve: bool) -> i32 {
    let job: Job = match std::fs::read(job_path)
        .map_err(anyhow::Error::from)
        .and_then(|b| serde_json::from_slice::<Job>(&b).map_err(anyhow::Error::from))
        .and_then(|mut j| j.absolutize().map(|_| j).map_err(anyhow::Error::from))
    {
        Ok(j) => j,
        Err(e) => {
            log_line(&format!(
                "npu-audit worker: cannot read job {}: {e}",
                job_path.display()
            ));
            return 2;
        }
    };
    super::pool::inject_fault(&job.target_id);
    let mut result = JobResult::starting();
    result.intra_threads = Some(job.intra_threads);
    let executed = if serve {
        serve_samples(&job, &mut result)
    } else {
        execute(&job, &mut result)
    };
    match executed {
        Ok(()) => {
            result.ok = true;
            result.phase = Phase::Done;
        }
        Err(e) => result.error = Some(format!("{e:#}")),
    }
    result.peak_rss_mb = crate::foundation::timings::peak_rss_mb();
    let final_path = job.output_dir.join("result.json");
    let tmp_path = job.output_dir.join("result.json.tmp");
    let written = serde_json::to_vec_pretty(&result)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| std::fs::write(&tmp_path, bytes).map_err(anyhow::Error::from))
        .and_then(|_| std::fs::rename(&tmp_path, &final_path).map_err(anyhow::Error::from));
    match written {
        Ok(()) => 0,
        Err(e) => {
            log_line(&format!("npu-audit worker: cannot write {}: {e}", final_path.display()));
            let full = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull);
            if full {
                super::pool::WORKER_NO_SPACE
            } else {
                2
            }
        }
    }
}

/// A line in the worker's log (its stderr, a file in the work directory). A log that cannot be
/// written, such as on a full disk, must not turn into a panic.
fn log_line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// ONNX Runtime errors carry the builder for recovery; only the message matters here.
fn ort_err<T>(e: ort::Error<T>) -> anyhow::Error {
    anyhow!("{e}")
}

fn execute(job: &Job, result: &mut JobResult) -> Result<()> {
    let env = load_runtime(job, result)?;
    result.phase = Phase::CreateSession;
    let mut session = create_session(job, &env, result)?;
    if !job.compile_only {
        run_samples(job, &mut session, result)?;
    }
    // The process ends right after the result is written: tearing the session and the
    // environment down (QNN releases its whole backend) would only delay the audit.
    std::mem::forget(session);
    std::mem::forget(env);
    Ok(())
}

/// Serves samples over the pipes of [`super::wire`]: the session created once, then every
/// request answered in order until the audit closes standard input. Frames go to a copy of
/// standard output, and standard output itself is pointed at the log: a native library that
/// prints must not corrupt them.
fn serve_samples(job: &Job, result: &mut JobResult) -> Result<()> {
    let mut frames = std::io::BufWriter::new(frames_out()?);
    let session = load_runtime(job, result).and_then(|env| {
        result.phase = Phase::CreateSession;
        let session = create_session(job, &env, result)?;
        std::mem::forget(env);
        Ok(session)
    });
    let mut session = match session {
        Ok(s) => s,
        Err(e) => {
            let _ = super::wire::write_error(&mut frames, &format!("{e:#}"));
            return Err(e);
        }
    };
    super::wire::write_ready(&mut frames, &serde_json::to_vec(result)?)?;
    let names: Vec<String> = session.outputs().iter().map(|o| o.name().to_string()).collect();
    let mut requests = std::io::BufReader::new(std::io::stdin().lock());
    let mut served = 0;
    while let Some(frame) = super::wire::read_frame(&mut requests)? {
        let super::wire::Frame::Request(inputs) = frame else {
            bail!("the audit sent a frame that is not a sample");
        };
        served += 1;
        super::pool::inject_sample_fault(&job.target_id, served);
        result.phase = Phase::Run;
        let start = Instant::now();
        match run_once(&mut session, &inputs, &names) {
            Ok(outputs) => {
                let ms = ms_since(start);
                result.run_ms.push(ms);
                let named: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&outputs).collect();
                super::wire::write_outputs(&mut frames, &named, ms)?;
            }
            Err(e) => super::wire::write_error(&mut frames, &format!("{e:#}"))?,
        }
    }
    std::mem::forget(session);
    Ok(())
}

/// A duplicate of standard output for frames, with standard output itself then pointed at
/// standard error (the worker's log).
fn frames_out() -> Result<std::fs::File> {
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: duplicating and redirecting this process's own standard descriptors; the
        // duplicate is owned by the returned File alone.
        let fd = unsafe { libc::dup(1) };
        if fd < 0 || unsafe { libc::dup2(2, 1) } < 0 {
            bail!("cannot set up the worker's frames: {}", std::io::Error::last_os_error());
        }
        Ok(unsafe { std::fs::File::from_raw_fd(fd) })
    }
    #[cfg(not(unix))]
    bail!("serving workers need a Unix system")
}

/// Loads the ONNX Runtime library, creates its environment and registers a plugin EP.
fn load_runtime(job: &Job, result: &mut JobResult) -> Result<Environment> {
    let start = Instant::now();
    let env_builder = ort::init_from(&job.ort_library).map_err(|e| anyhow!("cannot load ONNX Runtime: {e}"))?;
    result.ort_version = library_version(&job.ort_library);
    let env = env_builder
        .with_name("npu-audit")
        .with_telemetry(false)
        .build()
        .map_err(ort_err)?;
    result.load_ms = ms_since(start);

    result.phase = Phase::RegisterEp;
    let start = Instant::now();
    if let EpSetup::Plugin { ep_name, library, .. } = &job.ep {
        env.register_ep_library(ep_name.clone(), library)
            .map_err(|e| anyhow!("cannot register {ep_name} from {}: {e}", library.display()))?;
    }
    result.register_ms = ms_since(start);
    result.devices = env
        .devices()
        .map(|d| {
            let hw = d.hardware_device();
            format!(
                "{}: {} {:?}",
                d.ep().unwrap_or("?"),
                hw.vendor().unwrap_or("?"),
                hw.ty()
            )
        })
        .collect();
    Ok(env)
}

/// Creates the session: a QNN session loads its compiled context from the cache when there is a
/// verified entry, else compiles it (and stores it); any other session compiles. Records how in
/// the result.
fn create_session(job: &Job, env: &Environment, result: &mut JobResult) -> Result<Session> {
    let qnn = matches!(&job.ep, EpSetup::Plugin { ep_name, .. } if ep_name == QNN_EP);
    if qnn {
        result.context = Some(ContextUse::Uncached);
    }
    let cache = match JobCache::of(job, result.ort_version.as_deref()) {
        None => return compile_session(job, env, result, None),
        Some(Err(e)) => {
            result.context_note = Some(format!("no cache key: {e:#}"));
            return compile_session(job, env, result, None);
        }
        Some(Ok(cache)) => cache,
    };
    result.context = Some(ContextUse::Compiled);
    let (start, mark) = (Instant::now(), context_cache::log_mark());
    match cache.lookup() {
        Lookup::Hit(entry) => match load_session(job, env, result, &entry, start) {
            Ok(session) => {
                result.context = Some(ContextUse::Loaded);
                return Ok(session);
            }
            Err(e) => {
                context_cache::log_rewind(mark);
                cache.remove(entry);
                result.context = Some(ContextUse::Recompiled);
                result.context_note = Some(format!("ONNX Runtime refused the cached context: {e:#}"));
            }
        },
        Lookup::Miss => {}
        Lookup::Corrupt(why) => {
            result.context = Some(ContextUse::Recompiled);
            result.context_note = Some(format!("the cache entry was corrupt: {why}"));
        }
    }
    compile_and_store(job, env, result, &cache)
}

/// Compiles the session, writing its context into a staging directory of the cache, then stores
/// it with what the session said of itself. A context that cannot be stored costs only the cache.
fn compile_and_store(job: &Job, env: &Environment, result: &mut JobResult, cache: &JobCache) -> Result<Session> {
    let staged = match cache.stage() {
        Ok(s) => s,
        Err(e) => {
            result.context_note = Some(format!("the compiled context could not be stored: {e:#}"));
            return compile_session(job, env, result, None);
        }
    };
    let mark = context_cache::log_mark();
    let session = match compile_session(job, env, result, Some(staged.path())) {
        Ok(s) => s,
        // ONNX Runtime checks the context model it writes, and refuses some it writes itself
        // ("Duplicate definition of name" for a tensor that is two graph outputs): a failure
        // that is not the EP's own is retried without writing the context, its log unsaid.
        Err(e) if !format!("{e:#}").contains("QNN") => {
            context_cache::log_rewind(mark);
            result.context_note = Some(format!("the compiled context could not be written: {e:#}"));
            return compile_session(job, env, result, None);
        }
        Err(e) => return Err(e),
    };
    let record = SessionRecord {
        placement: result.placement.clone(),
        placement_error: result.placement_error.clone(),
        runtime_graph: result.runtime_graph.clone(),
        log: context_cache::log_since(mark),
    };
    if let Err(e) = cache.store(staged, &record) {
        result.context_note = Some(format!("the compiled context could not be stored: {e:#}"));
    }
    Ok(session)
}

/// Creates a session on a cached context model, and reports what the session that compiled it
/// said (placement, partitioned graph, log): the context model's QNN partitions are opaque nodes.
/// Its creation time counts from `start`, the lookup that verified the entry included.
fn load_session(
    job: &Job,
    env: &Environment,
    result: &mut JobResult,
    entry: &Entry,
    start: Instant,
) -> Result<Session> {
    let record = context_cache::read_record(entry)?;
    let session = builder_commit(session_builder(job, env)?, &context_cache::context_model(entry))?;
    result.session_create_ms = ms_since(start);
    result.output_types = session.outputs().iter().map(output_type).collect();
    if !record.log.is_empty() {
        log_line(record.log.trim_end_matches('\n'));
    }
    result.placement = record.placement;
    result.placement_error = record.placement_error;
    result.runtime_graph = record.runtime_graph.filter(|_| job.inspect_placement);
    Ok(session)
}

/// Compiles the session (the EP compiles its partitions), with a verbose log and the runtime's
/// partitioned graph when placement is inspected, and records the assignment and output types.
/// With `context_dir`, the EP also writes its compiled context there ([`context_cache`]).
fn compile_session(
    job: &Job,
    env: &Environment,
    result: &mut JobResult,
    context_dir: Option<&Path>,
) -> Result<Session> {
    let graph_dir = job.output_dir.join("runtime-graph");
    if job.inspect_placement {
        // EPs explain rejected nodes only at verbose level; ONNX Runtime writes its layout
        // transformation steps into the working directory.
        env.set_log_level(LogLevel::Verbose);
        std::fs::create_dir_all(&graph_dir)?;
        std::env::set_current_dir(&graph_dir)?;
    }
    let start = Instant::now();
    let mut builder = session_builder(job, env)?;
    if let Some(dir) = context_dir {
        let file = dir.join(context_cache::CONTEXT_MODEL);
        for (k, v) in [
            ("ep.context_enable", "1"),
            ("ep.context_embed_mode", "1"),
            ("ep.context_file_path", &file.to_string_lossy()),
        ] {
            builder = builder.with_config_entry(k, v).map_err(ort_err)?;
        }
    }
    let committed = builder_commit(builder, &job.model);
    if job.inspect_placement {
        env.set_log_level(LogLevel::Error);
        std::env::set_current_dir(&job.output_dir)?;
        result.runtime_graph = super::assignment::read_layout_dump(&graph_dir);
    }
    let session = committed?;
    result.session_create_ms = ms_since(start);
    result.output_types = session.outputs().iter().map(output_type).collect();
    match super::assignment::graph_assignment(&session) {
        Ok(p) => result.placement = p,
        Err(e) => result.placement_error = Some(format!("{e:#}")),
    }
    Ok(session)
}

/// Runs every sample (`repeat` times, the repeats compared bit for bit with the first run) and
/// writes the first run's outputs.
fn run_samples(job: &Job, session: &mut Session, result: &mut JobResult) -> Result<()> {
    let output_names: Vec<String> = session.outputs().iter().map(|o| o.name().to_string()).collect();
    if let Some(name) = super::pool::refused_output(&job.target_id).filter(|n| output_names.contains(n)) {
        result.phase = Phase::Run;
        bail!("injected fault: this session cannot return output {name}");
    }
    let fed = fed_outputs(job, &output_names)?;
    if let Some(root) = &job.delta_root {
        crate::data::tensor::delta::allow_root(root);
    }
    let mut state: Vec<Option<Tensor>> = Vec::new();
    for (si, sample) in job.samples.iter().enumerate() {
        result.phase = Phase::Run;
        let reading = Instant::now();
        let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(sample.len());
        // The file each input's value is in, when an output may be written as its extension.
        let mut bases: Vec<Option<PathBuf>> = Vec::with_capacity(sample.len());
        for input in sample {
            // A fed-back input after the first step is the previous step's output: its file
            // holds only the first step's value.
            let carried = fed.iter().position(|(_, name)| *name == input.name).filter(|_| si > 0);
            let (tensor, base) = match carried.and_then(|k| state.get_mut(k)?.take().map(|t| (k, t))) {
                Some((k, t)) => (t, Some(output_file(&job.output_dir, si - 1, fed[k].0))),
                // A step of a stream the golden run fed (teacher forcing) is a delta file.
                None => (
                    Tensor::read_npy(&input.path)?,
                    Some(input.path.clone()).filter(|p| crate::data::tensor::delta::is_delta(p)),
                ),
            };
            tensors.push((input.name.clone(), tensor));
            bases.push(base.filter(|_| job.delta_root.is_some()));
        }
        result.io_ms += ms_since(reading);
        let start = Instant::now();
        let first = run_once(session, &tensors, &output_names)?;
        result.run_ms.push(ms_since(start));
        for run in 1..job.repeat.max(1) {
            let again = run_once(session, &tensors, &output_names)?;
            for ((name, reference), tensor) in output_names.iter().zip(&first).zip(&again) {
                let differing = differing_bits(reference, tensor);
                if differing > 0 {
                    result.repeat_differences.push(RepeatDifference {
                        sample: si,
                        run,
                        output: name.clone(),
                        differing,
                        elements: reference.len() as u64,
                    });
                }
            }
        }
        state = fed.iter().map(|(o, _)| first.get(*o).cloned()).collect();
        result.phase = Phase::WriteOutputs;
        let writing = Instant::now();
        let bases: Vec<(PathBuf, &Tensor)> = bases
            .into_iter()
            .zip(&tensors)
            .filter_map(|(b, (_, t))| Some((b?, t)))
            .collect();
        result.outputs.push(write_outputs(
            &job.output_dir.join(format!("s{si}")),
            &output_names,
            first,
            &bases,
        )?);
        result.io_ms += ms_since(writing);
    }
    Ok(())
}

/// The fed-back outputs of a stream as (output index, input name).
fn fed_outputs(job: &Job, output_names: &[String]) -> Result<Vec<(usize, String)>> {
    job.feedback
        .iter()
        .map(|f| {
            let k = output_names
                .iter()
                .position(|n| *n == f.output)
                .with_context(|| format!("the session has no output '{}' to feed back", f.output))?;
            Ok((k, f.input.clone()))
        })
        .collect()
}

/// One run of the session on `inputs`: every output, in `names` order.
fn run_once(session: &mut Session, inputs: &[(String, Tensor)], names: &[String]) -> Result<Vec<Tensor>> {
    let values = inputs
        .iter()
        .map(|(name, t)| Ok((name.clone(), SessionInputValue::from(to_ort(t).map_err(ort_err)?))))
        .collect::<Result<Vec<(String, SessionInputValue<'static>)>>>()?;
    let outputs = session.run(values).map_err(ort_err)?;
    names
        .iter()
        .map(|name| {
            let value = outputs
                .get(name.as_str())
                .with_context(|| format!("output '{name}' missing"))?;
            from_ort(value).with_context(|| format!("output '{name}'"))
        })
        .collect()
}

/// The file of output `oi` of step (sample) `si`.
fn output_file(output_dir: &Path, si: usize, oi: usize) -> PathBuf {
    output_dir.join(format!("s{si}")).join(format!("o{oi}.npy"))
}

/// Writes one sample's outputs as `dir/o{k}.npy`. An output that extends one of `bases` (an
/// input's value and the file it is in: a growing stream state) is written as what it adds.
fn write_outputs(
    dir: &Path,
    names: &[String],
    tensors: Vec<Tensor>,
    bases: &[(PathBuf, &Tensor)],
) -> Result<Vec<OutputFile>> {
    use crate::data::tensor::delta::{extension, write_delta, Flat};
    std::fs::create_dir_all(dir)?;
    let flat_bases: Vec<(&PathBuf, Flat)> = bases.iter().map(|(p, t)| (p, Flat::of(t))).collect();
    let mut files = Vec::with_capacity(names.len());
    for (oi, (name, tensor)) in names.iter().zip(tensors).enumerate() {
        let path = dir.join(format!("o{oi}.npy"));
        let out = (!flat_bases.is_empty()).then(|| Flat::of(&tensor));
        let delta = out.as_ref().and_then(|out| {
            flat_bases
                .iter()
                .find_map(|(base, prev)| extension(prev, out).map(|(axis, tail)| (*base, axis, tail)))
        });
        let written = match delta {
            Some((base, axis, tail)) => write_delta(&path, base, &tensor, axis, &tail)?,
            None => false,
        };
        if !written {
            tensor.write_npy(&path)?;
        }
        files.push(OutputFile {
            name: name.clone(),
            dtype: tensor.dtype(),
            shape: tensor.shape.clone(),
            path,
        });
    }
    Ok(files)
}

/// The declared type of one session output.
fn output_type(o: &ort::value::Outlet) -> OutputType {
    let (elem_type, shape) = match o.dtype() {
        ValueType::Tensor { ty, shape, .. } => (onnx_code(*ty), shape.iter().copied().collect()),
        _ => (0, Vec::new()),
    };
    OutputType {
        name: o.name().to_string(),
        elem_type,
        shape,
    }
}

/// The ONNX `TensorProto.DataType` code of an element type (0 for types the audit does not read).
fn onnx_code(ty: TensorElementType) -> i32 {
    match ty {
        TensorElementType::Float32 => 1,
        TensorElementType::Uint8 => 2,
        TensorElementType::Int8 => 3,
        TensorElementType::Uint16 => 4,
        TensorElementType::Int16 => 5,
        TensorElementType::Int32 => 6,
        TensorElementType::Int64 => 7,
        TensorElementType::Bool => 9,
        TensorElementType::Float16 => 10,
        TensorElementType::Float64 => 11,
        TensorElementType::Uint32 => 12,
        TensorElementType::Uint64 => 13,
        _ => 0,
    }
}

/// Elements of `b` whose bits differ from `a`'s (all of them when the shapes or types differ).
fn differing_bits(a: &Tensor, b: &Tensor) -> u64 {
    if a.shape != b.shape || a.dtype() != b.dtype() {
        return a.len().max(b.len()) as u64;
    }
    let width = a.dtype().size();
    let (x, y) = (a.data.to_le_bytes(), b.data.to_le_bytes());
    x.chunks(width).zip(y.chunks(width)).filter(|(p, q)| p != q).count() as u64
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn session_builder(job: &Job, env: &Environment) -> Result<SessionBuilder> {
    let level = match job.opt {
        OptLevel::Disable => GraphOptimizationLevel::Disable,
        OptLevel::Basic => GraphOptimizationLevel::Level1,
        OptLevel::Extended => GraphOptimizationLevel::Level2,
        OptLevel::All => GraphOptimizationLevel::All,
    };
    let mut b = Session::builder(env)
        .map_err(ort_err)?
        .with_optimization_level(level)
        .map_err(ort_err)?
        .with_intra_threads(job.intra_threads)
        .map_err(ort_err)?;
    for (name, value) in &job.free_dims {
        b = b.with_dimension_override(name, *value).map_err(ort_err)?;
    }
    b = b
        .with_config_entry(super::assignment::RECORD_ASSIGNMENT, "1")
        .map_err(ort_err)?;
    if job.inspect_placement {
        b = b
            .with_config_entry(super::assignment::DUMP_LAYOUT_TRANSFORMATION, "1")
            .map_err(ort_err)?;
    }
    for (k, v) in &job.session_config {
        b = b.with_config_entry(k, v).map_err(ort_err)?;
    }
    // Devices are always chosen explicitly: once a plugin EP is registered, ONNX Runtime's automatic
    // policy would otherwise hand even a "CPU" session to it.
    b = match &job.ep {
        EpSetup::Cpu { options } => {
            let prefixed: Vec<(String, String)> = options
                .iter()
                .map(|(k, v)| (format!("CPUExecutionProvider.{k}"), v.clone()))
                .collect();
            let cpu: Vec<_> = env
                .devices()
                .filter(|d| d.ep().is_ok_and(|n| n == "CPUExecutionProvider"))
                .collect();
            if cpu.is_empty() {
                if !options.is_empty() {
                    bail!("this ONNX Runtime offers no CPU device to pass CPU EP options to");
                }
                b
            } else {
                b.with_devices(cpu, Some(&prefixed)).map_err(ort_err)?
            }
        }
        EpSetup::Plugin { ep_name, options, .. } => {
            let devices: Vec<_> = env.devices().filter(|d| d.ep().is_ok_and(|n| n == ep_name)).collect();
            if devices.is_empty() {
                bail!("{ep_name} offered no device after registration");
            }
            let prefixed: Vec<(String, String)> = options
                .iter()
                .map(|(k, v)| (format!("{ep_name}.{k}"), v.clone()))
                .collect();
            b.with_devices(devices, Some(&prefixed)).map_err(ort_err)?
        }
        EpSetup::BuiltIn { ep_name, options } => {
            let dispatch = built_in_ep(ep_name, options)?;
            b.with_execution_providers([dispatch]).map_err(ort_err)?
        }
    };
    Ok(b)
}

fn builder_commit(mut builder: SessionBuilder, model: &Path) -> Result<Session> {
    builder.commit_from_file(model).map_err(ort_err)
}

fn built_in_ep(ep_name: &str, options: &[(String, String)]) -> Result<ort::ep::ExecutionProviderDispatch> {
    use ort::ep::ArbitrarilyConfigurableExecutionProvider;
    fn configured<E: ArbitrarilyConfigurableExecutionProvider>(mut ep: E, options: &[(String, String)]) -> E {
        for (k, v) in options {
            ep = ep.with_arbitrary_config(k, v);
        }
        ep
    }
    let dispatch = match ep_name {
        "OpenVINOExecutionProvider" => configured(ort::ep::OpenVINO::default(), options).build(),
        "CUDAExecutionProvider" => configured(ort::ep::CUDA::default(), options).build(),
        "TensorrtExecutionProvider" => configured(ort::ep::TensorRT::default(), options).build(),
        "DmlExecutionProvider" => ort::ep::DirectML::default().build(),
        other => bail!("unknown execution provider {other}"),
    };
    // Registration failure must fail the target, not silently fall back to the CPU.
    Ok(dispatch.error_on_failure())
}

/// The version string the library reports through `OrtGetApiBase()->GetVersionString()`.
fn library_version(path: &Path) -> Option<String> {
    // SAFETY: the library is already loaded by `ort::init_from`; loading it again only bumps its
    // reference count, and `OrtGetApiBase` has this signature in every ONNX Runtime release.
    unsafe {
        let lib = libloading::Library::new(path).ok()?;
        let get_base: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> =
            lib.get(b"OrtGetApiBase").ok()?;
        let base = get_base();
        if base.is_null() {
            return None;
        }
        let text = ((*base).GetVersionString)();
        if text.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned())
    }
}

fn to_ort(t: &Tensor) -> ort::Result<DynValue> {
    let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
    macro_rules! make {
        ($v:expr) => {
            OrtTensor::from_array((shape, $v.clone()))?.into_dyn()
        };
    }
    Ok(match &t.data {
        TensorData::Float32(v) => make!(v),
        TensorData::Float64(v) => make!(v),
        TensorData::Float16(v) => {
            let halfs: Vec<half::f16> = v.iter().map(|b| half::f16::from_bits(*b)).collect();
            make!(halfs)
        }
        TensorData::Int8(v) => make!(v),
        TensorData::Uint8(v) => make!(v),
        TensorData::Int16(v) => make!(v),
        TensorData::Uint16(v) => make!(v),
        TensorData::Int32(v) => make!(v),
        TensorData::Uint32(v) => make!(v),
        TensorData::Int64(v) => make!(v),
        TensorData::Uint64(v) => make!(v),
        TensorData::Bool(v) => make!(v),
    })
}

fn from_ort(v: &DynValue) -> Result<Tensor> {
    let ValueType::Tensor { ty, .. } = v.dtype() else {
        bail!("is not a tensor (sequence and map outputs are not supported)");
    };
    macro_rules! take {
        ($t:ty, $variant:ident) => {{
            let (shape, data) = v.try_extract_tensor::<$t>().map_err(|e| anyhow!("{e}"))?;
            (
                shape.iter().map(|&d| d.max(0) as usize).collect::<Vec<_>>(),
                TensorData::$variant(data.to_vec()),
            )
        }};
    }
    let (shape, data) = match ty {
        TensorElementType::Float32 => take!(f32, Float32),
        TensorElementType::Float64 => take!(f64, Float64),
        TensorElementType::Float16 => {
            let (shape, data) = v.try_extract_tensor::<half::f16>().map_err(|e| anyhow!("{e}"))?;
            (
                shape.iter().map(|&d| d.max(0) as usize).collect(),
                TensorData::Float16(data.iter().map(|h| h.to_bits()).collect()),
            )
        }
        TensorElementType::Int8 => take!(i8, Int8),
        TensorElementType::Uint8 => take!(u8, Uint8),
        TensorElementType::Int16 => take!(i16, Int16),
        TensorElementType::Uint16 => take!(u16, Uint16),
        TensorElementType::Int32 => take!(i32, Int32),
        TensorElementType::Uint32 => take!(u32, Uint32),
        TensorElementType::Int64 => take!(i64, Int64),
        TensorElementType::Uint64 => take!(u64, Uint64),
        TensorElementType::Bool => take!(bool, Bool),
        other => bail!("has element type {other:?}, which the audit does not support"),
    };
    Tensor::new(shape, data)
}
