//! The `npu-audit` binary: parses the command line, calls the library, prints, and ends with a
//! documented exit code. Every error is one line on stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use npu_audit::audit::{check_writable, run_compare, run_golden_create, CompareOptions, ExecOptions, GoldenOptions};
use npu_audit::cli::{Cli, Command, CompareArgs, ExecArgs, Format, GoldenCommand, InputArgs, RuntimeCommand};
use npu_audit::error::{exit_code_of, one_line, usage, ExitCode};
use npu_audit::gate::Thresholds;
use npu_audit::inputs::InputOptions;
use npu_audit::report::{json, table};
use npu_audit::runtime::Provisioner;
use npu_audit::{listing, worker};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { ExitCode::Usage as i32 } else { 0 };
            if e.use_stderr() {
                // clap's message is several lines; keep the first (the error) and point at --help.
                let text = e.to_string();
                let first = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("invalid arguments");
                eprintln!("npu-audit: {}", first.trim_start_matches("error: "));
                eprintln!("npu-audit: see `npu-audit --help`");
            } else {
                let _ = e.print();
            }
            std::process::exit(code);
        }
    };
    if let Command::Worker { job } = &cli.command {
        std::process::exit(worker::child::run(job));
    }
    let code = match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("npu-audit: error: {}", one_line(&e));
            exit_code_of(&e)
        }
    };
    std::process::exit(code as i32);
}

fn exec_options(e: &ExecArgs) -> Result<ExecOptions> {
    if !(e.timeout.is_finite() && e.timeout > 0.0) {
        return Err(usage("--timeout must be a positive number of seconds"));
    }
    if e.jobs == Some(0) || e.threads == Some(0) {
        return Err(usage("--jobs and --threads must be at least 1"));
    }
    Ok(ExecOptions {
        timeout: Duration::from_secs_f64(e.timeout),
        jobs: e.jobs,
        threads: e.threads,
        runtime_flags: e.runtime.clone(),
        keep_work: e.keep_work,
    })
}

fn input_options(i: &InputArgs) -> InputOptions {
    InputOptions {
        npz: i.npz.clone(),
        npy: i.npy.clone(),
        gen: i.gen.clone(),
        seed: i.seed,
        samples: i.samples as usize,
        shapes: i.shapes.clone(),
    }
}

fn print_stdout(text: &str) -> Result<()> {
    let mut out = anstream::stdout();
    // A closed pipe (`| head`) is not an error worth reporting.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn compare(a: CompareArgs) -> Result<ExitCode> {
    if let Some(out) = &a.out {
        check_writable(out)?;
    }
    if let Some(v) = a.min_sqnr.filter(|v| v.is_nan()) {
        return Err(usage(format!("--min-sqnr {v} is not a number")));
    }
    if a.max_abs.is_some_and(|v| v.is_nan() || v < 0.0) {
        return Err(usage("--max-abs must be a non-negative number"));
    }
    let opts = CompareOptions {
        model: a.model,
        reference: a.reference,
        golden: a.golden_dir,
        targets: a.targets,
        allow_failure: a.allow_failure,
        no_baseline: a.no_baseline,
        inputs: input_options(&a.inputs),
        class_axis: a.class_axis,
        thresholds: Thresholds {
            min_sqnr_db: a.min_sqnr,
            max_abs: a.max_abs,
            require_bit_exact: a.require_bit_exact,
        },
        exec: exec_options(&a.exec)?,
        save_outputs: a.save_outputs,
    };
    let report = run_compare(&opts)?;
    let json_text = json::to_string(&report)?;
    if let Some(out) = &a.out {
        json::write_atomic(out, json_text.as_bytes())?;
    }
    match a.format {
        Format::Json => print_stdout(&(json_text + "\n"))?,
        Format::Table => print_stdout(&table::render(&report))?,
    }
    for t in report
        .targets
        .iter()
        .filter(|t| t.required && t.status != npu_audit::worker::RunStatus::Ok)
    {
        eprintln!(
            "npu-audit: required target {} {}: {}",
            t.id,
            t.status.as_str(),
            t.error.clone().unwrap_or_default().lines().next().unwrap_or("")
        );
    }
    Ok(match report.exit_code {
        0 => ExitCode::Success,
        1 => ExitCode::DriftExceeded,
        3 => ExitCode::TargetFailed,
        _ => ExitCode::Environment,
    })
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compare(a) => compare(a),
        Command::Targets(a) => {
            let rows = listing::availability(&a.runtime)?;
            match a.format {
                Format::Json => print_stdout(&(serde_json::to_string_pretty(&rows)? + "\n"))?,
                Format::Table => print_stdout(&(listing::targets_table(&rows) + "\n"))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::List { format }) => {
            let rows = listing::runtime_rows()?;
            match format {
                Format::Json => print_stdout(&(serde_json::to_string_pretty(&rows)? + "\n"))?,
                Format::Table => print_stdout(&(listing::runtime_table(&rows) + "\n"))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::Install { keys }) => {
            let p = Provisioner::new(&[])?;
            for b in listing::install_keys(&keys)? {
                let rt = p.get(b)?;
                println!("{} {} {}", b.key, b.label(), rt.library.display());
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::Path { key }) => {
            let b = listing::install_keys(std::slice::from_ref(&key))?;
            let p = Provisioner::new(&[])?;
            for b in b {
                println!("{}", p.get(b)?.library.display());
            }
            Ok(ExitCode::Success)
        }
        Command::Golden(GoldenCommand::Create {
            model,
            out,
            force,
            inputs,
            exec,
        }) => {
            let dir: PathBuf = run_golden_create(&GoldenOptions {
                model,
                out,
                force,
                inputs: input_options(&inputs),
                exec: exec_options(&exec)?,
            })?;
            eprintln!("npu-audit: golden run written to {}", dir.display());
            Ok(ExitCode::Success)
        }
        Command::Worker { .. } => Ok(ExitCode::Success),
    }
}
