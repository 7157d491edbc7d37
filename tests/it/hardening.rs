//! Regression tests for defects found by adversarial QA: each one names what went wrong before.

use crate::common;

use common::*;

#[test]
fn golden_force_never_replaces_the_current_directory_or_a_non_golden_directory() {
    let dir = tempdir();
    let keep = dir.path().join("precious");
    std::fs::create_dir(&keep).unwrap();
    std::fs::write(keep.join("keep.txt"), "keep").unwrap();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let out = bin()
        .args([
            "golden",
            "create",
            fp32.to_str().unwrap(),
            "--out",
            keep.to_str().unwrap(),
            "--force",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a golden run"));
    let out = bin()
        .current_dir(&keep)
        .args(["golden", "create", fp32.to_str().unwrap(), "--out", ".", "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("current directory"));
    let out = bin()
        .current_dir(&keep)
        .args(["golden", "create", fp32.to_str().unwrap(), "--out", "..", "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(keep.join("keep.txt")).unwrap(), "keep");
    // An earlier golden run is replaced, and only once the new one is complete.
    let g = dir.path().join("g");
    for _ in 0..2 {
        let out = run(&[
            "golden",
            "create",
            fp32.to_str().unwrap(),
            "--out",
            g.to_str().unwrap(),
            "--force",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(g.join("manifest.json").is_file());
}

#[test]
fn nan_where_the_golden_run_has_numbers_is_an_infinite_error_not_an_exact_match() {
    let dir = tempdir();
    let log = dir.path().join("log.onnx");
    let log_abs = dir.path().join("logabs.onnx");
    chain_model(&log, &["Log"], &[1, 10]);
    chain_model(&log_abs, &["Abs", "Log"], &[1, 10]);
    let (code, report, stderr) = compare_json(&[
        log.to_str().unwrap(),
        "--reference",
        log_abs.to_str().unwrap(),
        "-t",
        "cpu",
        "--no-baseline",
        "--gen",
        "uniform:-1,1",
        "--min-sqnr",
        "40",
    ]);
    assert_eq!(code, 1, "{stderr}");
    let o = output(&report, "cpu", "y");
    let nans = o["nan_count"].as_u64().unwrap();
    assert!(nans > 0);
    assert_eq!(o["nonfinite_mismatch"], nans);
    assert_eq!(o["sqnr_db"], "-inf");
    assert_eq!(o["max_abs"], "inf");
    assert_eq!(o["mean_abs"], "inf");
    assert_eq!(o["cosine"], "nan");
    assert!(o["max_ulp"].is_null());
    assert_eq!(report["gate"]["verdict"], "fail");
    assert_eq!(report["tolerances"][0]["min_sqnr_db"], "-inf");
}

#[test]
fn command_line_values_out_of_range_are_one_line_usage_errors() {
    fails_with(&["compare", &cnn(), "--timeout=1e30"], 2, "--timeout");
    fails_with(&["compare", &cnn(), "--timeout", "-1"], 2, "--timeout");
    fails_with(
        &["compare", &cnn(), "--max-abs", "-1"],
        2,
        "--max-abs must be a non-negative number",
    );
    fails_with(&["compare", &cnn(), "--samples", "-1"], 2, "--samples");
    fails_with(&["compare", &cnn(), "--threads", "100000"], 2, "--threads");
    fails_with(&["compare"], 2, "<MODEL>");
    fails_with(
        &["compare", &cnn(), "--format", "xml"],
        2,
        "[possible values: table, json, markdown]",
    );
    fails_with(
        &["compare", &cnn(), "--input-shape", "image:1000000000,10,10,10"],
        2,
        "--input-shape",
    );
    fails_with(
        &["compare", &cnn(), "--input-shape", "image:2,3,32,32"],
        2,
        "conflicts with the model's declared shape",
    );
    fails_with(&["compare", &cnn(), "--class-axis", "5"], 2, "axis 5 does not exist");
    fails_with(
        &["compare", &cnn(), "--class-axis", "nope=1"],
        2,
        "has no output 'nope'",
    );
    fails_with(
        &["compare", &cnn(), "-t", "qnn:sm8650,soc_model=99"],
        2,
        "set by the chipset",
    );
    fails_with(&["compare", &cnn(), "-t", "cpu,a=1,a=2"], 2, "given twice");
    fails_with(&["runtime", "path", "directml"], 2, "of no use on this machine");
}

#[test]
fn a_reference_of_another_shape_is_refused_not_reported_as_compared() {
    let dir = tempdir();
    let a = dir.path().join("a.onnx");
    let b = dir.path().join("b.onnx");
    chain_model(&a, &["Relu"], &[1, 10]);
    chain_model(&b, &["Relu"], &[2, 5]);
    // Same input name and type but another shape: the inputs do not fit the reference.
    fails_with(
        &[
            "compare",
            a.to_str().unwrap(),
            "--reference",
            b.to_str().unwrap(),
            "-t",
            "cpu",
        ],
        2,
        "must have shape [2,5]",
    );
    // Same inputs, an output of another shape ([10, 1] instead of [1, 10]).
    let t = dir.path().join("t.onnx");
    chain_model(&t, &["Transpose"], &[1, 10]);
    fails_with(
        &[
            "compare",
            a.to_str().unwrap(),
            "--reference",
            t.to_str().unwrap(),
            "-t",
            "cpu",
        ],
        2,
        "the reference does not compute this model's output",
    );
}

#[test]
fn conflicting_input_sources_are_refused() {
    let dir = tempdir();
    let g = dir.path().join("g");
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    assert!(
        run(&["golden", "create", fp32.to_str().unwrap(), "--out", g.to_str().unwrap()])
            .status
            .success()
    );
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "--gen", "zeros"],
        2,
        "--golden supplies the inputs",
    );
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "--samples", "3"],
        2,
        "--golden supplies the inputs",
    );
    fails_with(
        &[
            "compare",
            &cnn(),
            "--inputs",
            repo("fixtures/inputs/cnn_seed7.npz").to_str().unwrap(),
            "--gen",
            "zeros",
        ],
        2,
        "every input comes from a file",
    );
    fails_with(
        &[
            "compare",
            &cnn(),
            "--gen",
            "image=uniform:0.5,1.5",
            "--gen",
            "image=zeros",
        ],
        2,
        "twice",
    );
}

#[test]
fn the_golden_manifest_must_be_consistent_and_stay_inside_its_directory() {
    let dir = tempdir();
    let g = dir.path().join("g");
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    assert!(run(&[
        "golden",
        "create",
        fp32.to_str().unwrap(),
        "--out",
        g.to_str().unwrap(),
        "--samples",
        "2"
    ])
    .status
    .success());
    let manifest_path = g.join("manifest.json");
    let original = std::fs::read_to_string(&manifest_path).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&original).unwrap();
    m["samples"][1]["outputs"][0]["name"] = "other".into();
    std::fs::write(&manifest_path, serde_json::to_string(&m).unwrap()).unwrap();
    fails_with(&["compare", &cnn(), "--golden", g.to_str().unwrap()], 2, "inconsistent");
    let mut m: serde_json::Value = serde_json::from_str(&original).unwrap();
    m["samples"][0]["outputs"][0]["file"] = "../elsewhere.npy".into();
    std::fs::write(&manifest_path, serde_json::to_string(&m).unwrap()).unwrap();
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap()],
        2,
        "outside the golden directory",
    );
}

#[test]
fn a_reference_onnx_runtime_cannot_load_is_an_input_error() {
    let dir = tempdir();
    let model = dir.path().join("m.onnx");
    chain_model(&model, &["NoSuchOperator"], &[1, 4]);
    fails_with(
        &["compare", model.to_str().unwrap(), "-t", "cpu"],
        2,
        "cannot run the reference model",
    );
}

#[test]
fn outputs_are_saved_only_into_an_empty_directory() {
    let dir = tempdir();
    std::fs::write(dir.path().join("stale.npz"), "x").unwrap();
    fails_with(
        &[
            "compare",
            &cnn(),
            "-t",
            "cpu",
            "--save-outputs",
            dir.path().to_str().unwrap(),
        ],
        2,
        "is not empty",
    );
}

#[cfg(unix)]
#[test]
fn an_interrupted_audit_stops_its_workers_and_removes_its_work_directory() {
    let tmp = tempdir();
    let mut child = spawn_hanging_audit(tmp.path());
    // Wait until the hanging worker has its log in the work directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let work_dir_exists = || !work_dirs(tmp.path()).is_empty();
    while !work_dir_exists() {
        assert!(std::time::Instant::now() < deadline, "no work directory appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill(2) on the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!work_dir_exists(), "the work directory was left behind");
}

#[test]
fn an_npy_header_claiming_a_huge_shape_is_refused_before_any_allocation() {
    let dir = tempdir();
    let path = dir.path().join("huge.npy");
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 100), }";
    let pad = 64 - (10 + dict.len() + 1) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let arg = format!("image={}", path.display());
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--input", &arg],
        2,
        "has more than 2147483648 elements",
    );
}

// ---- Issue 14: trust under hostile conditions. One test (or more) per numbered item. ----

/// A character device like the system's `/dev/full` (1, 7), created inside `dir`: never the real
/// one. Needs root (CI runs as root), and fails the test otherwise.
#[cfg(target_os = "linux")]
fn full_device(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let path = dir.join("full");
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mknod(2) on a path inside the test's own temporary directory.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 7)) };
    assert_eq!(rc, 0, "mknod needs root: {}", std::io::Error::last_os_error());
    path
}

#[cfg(target_os = "linux")]
fn is_char_device(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

#[cfg(target_os = "linux")]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Item 1: `--out /dev/full` as root replaced the device with a JSON file.
#[cfg(target_os = "linux")]
#[test]
fn report_files_never_replace_a_device() {
    let dir = tempdir();
    let dev = full_device(dir.path());
    let d = dev.display().to_string();
    for flag in ["--out", "--markdown", "--junit", "--html"] {
        fails_with(&["compare", &cnn(), "-t", "cpu", flag, &d], 2, "is a character device");
        assert!(is_char_device(&dev), "{flag} replaced the device");
    }
    for flag in ["--node-data", "--save-outputs", "--logs"] {
        fails_with(
            &["compare", &cnn(), "-t", "cpu", flag, &d],
            2,
            "is a character device, not a directory",
        );
        assert!(is_char_device(&dev), "{flag} replaced the device");
    }
    // A symbolic link to the device is the device.
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&dev, &link).unwrap();
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--out", link.to_str().unwrap()],
        2,
        "is a character device",
    );
    assert!(is_char_device(&dev));
}

/// Item 1: a FIFO as `--out` (the audit would block on it, or replace it).
#[cfg(target_os = "linux")]
#[test]
fn report_files_never_replace_a_fifo() {
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a path inside the test's own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let out = bin()
        .timeout(std::time::Duration::from_secs(120))
        .args(["compare", &cnn(), "-t", "cpu", "--out", fifo.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a FIFO"));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}

/// Item 1: a symbolic link was replaced by the report (its target untouched), and an existing
/// 0644 report came back 0600.
#[cfg(target_os = "linux")]
#[test]
fn a_report_is_written_through_a_link_and_keeps_the_mode_of_the_file_it_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let real = dir.path().join("real.json");
    let md = dir.path().join("report.md");
    std::fs::write(&real, "old").unwrap();
    std::fs::write(&md, "old").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&md, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = run(&[
        "compare",
        &cnn(),
        "-t",
        "cpu",
        "--out",
        link.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(),
        "the link was replaced"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&real).unwrap()).unwrap();
    assert_eq!(report["tool"]["name"], "npu-audit");
    assert_eq!(mode(&real), 0o644);
    assert_eq!(mode(&md), 0o640);
    assert!(std::fs::read_to_string(&md).unwrap().contains("npu-audit"));
    // A new file gets the usual mode (0666 less the umask, 0644 under the usual 022).
    let fresh = dir.path().join("fresh.json");
    let out = run(&["compare", &cnn(), "-t", "cpu", "--out", fresh.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    // SAFETY: umask(2) read and restored at once.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    assert_eq!(mode(&fresh), 0o666 & !(umask as u32));
    // Standard output.
    let out = run(&["compare", &cnn(), "-t", "cpu", "--out", "-"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--out - writes JSON on stdout");
    assert_eq!(report["tool"]["name"], "npu-audit");
}

/// Item 1: `compare m.onnx --out m.onnx` replaced the audited model; the same through a hard
/// link; a golden run replacing the directory holding its model; a merge over its own report.
#[cfg(unix)]
#[test]
fn no_output_replaces_one_of_the_run_inputs() {
    let dir = tempdir();
    let model = dir.path().join("m.onnx");
    std::fs::copy(cnn(), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let m = model.to_str().unwrap();
    fails_with(&["compare", m, "-t", "cpu", "--out", m], 2, "one of this run's inputs");
    let hard = dir.path().join("hard.json");
    std::fs::hard_link(&model, &hard).unwrap();
    fails_with(
        &["compare", m, "-t", "cpu", "--html", hard.to_str().unwrap()],
        2,
        "one of this run's inputs",
    );
    fails_with(
        &[
            "compare",
            m,
            "-t",
            "cpu",
            "--reference",
            &cnn_fp32(),
            "--junit",
            &cnn_fp32(),
        ],
        2,
        "one of this run's inputs",
    );
    assert_eq!(std::fs::read(&model).unwrap(), before);

    let g = dir.path().join("g");
    let out = run(&["golden", "create", &cnn_fp32(), "--out", g.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let inside = g.join("m_fp32.onnx");
    std::fs::copy(cnn_fp32(), &inside).unwrap();
    fails_with(
        &[
            "golden",
            "create",
            inside.to_str().unwrap(),
            "--out",
            g.to_str().unwrap(),
            "--force",
        ],
        2,
        "an input of this run",
    );
    assert!(inside.is_file(), "the golden run deleted its own model");

    let report = dir.path().join("r.json");
    let out = run(&["compare", m, "-t", "cpu", "--out", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let r = report.to_str().unwrap();
    fails_with(&["merge", r, "--out", r], 2, "one of this run's inputs");
    fails_with(&["render", r, "--out", r], 2, "one of this run's inputs");
}

/// Item 4: an `--html` that could not be written still left the `--out` JSON.
#[test]
fn outputs_are_committed_together_or_not_at_all() {
    let dir = tempdir();
    let json = dir.path().join("r.json");
    let html = dir.path().join("missing-dir").join("r.html");
    fails_with(
        &[
            "compare",
            &cnn(),
            "-t",
            "cpu",
            "--out",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        2,
        "does not exist",
    );
    assert!(
        !json.exists(),
        "the JSON report was written although the HTML could not be"
    );
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(entries.is_empty(), "files were left: {entries:?}");
}

/// The cnn fixture's input as an uncompressed `.npz` archive, and where its data starts.
fn cnn_inputs_npz(path: &std::path::Path) -> usize {
    let t = npu_audit::data::tensor::Tensor::new(
        vec![1, 3, 32, 32],
        npu_audit::data::tensor::TensorData::Float32((0..3072).map(|i| (i as f32 / 3072.0) - 0.5).collect()),
    )
    .unwrap();
    npu_audit::data::tensor::write_npz(path, &[("image".to_string(), &t)]).unwrap();
    // Local header (30 bytes + "image.npy" + ZIP64 extra of 20) + the 128-byte .npy header.
    std::fs::read(path).unwrap().len() - 3072 * 4 - 200
}

/// Item 3: a one-byte-corrupted `.npz` was audited with exit 0 (NumPy refuses it: CRC-32).
#[test]
fn a_corrupted_npz_is_refused_by_its_checksum() {
    let dir = tempdir();
    let npz = dir.path().join("in.npz");
    cnn_inputs_npz(&npz);
    let good = run(&["compare", &cnn(), "-t", "cpu", "--inputs", npz.to_str().unwrap()]);
    assert_eq!(good.status.code(), Some(0), "{}", String::from_utf8_lossy(&good.stderr));
    let mut bytes = std::fs::read(&npz).unwrap();
    // A byte in the middle of the array data (the archive is stored, not compressed).
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&npz, bytes).unwrap();
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--inputs", npz.to_str().unwrap()],
        2,
        "the archive is damaged",
    );
}

/// Item 3: a small `.npz` whose member inflates to gigabytes was inflated before its shape was
/// checked. The header is now checked against the model first: the refusal names the shape,
/// not a truncated or exhausted inflation.
#[test]
fn an_npz_array_of_the_wrong_shape_is_refused_before_it_is_inflated() {
    use std::io::Write;
    let dir = tempdir();
    let npz = dir.path().join("bomb.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&npz).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zip.start_file("image.npy", options).unwrap();
    // Claims 2^29 float32 values (2 GiB); only 1 MiB of zeros follows.
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (536870912,), }";
    let header = format!("{dict}{}\n", " ".repeat(128 - 10 - dict.len() - 1));
    zip.write_all(b"\x93NUMPY\x01\x00").unwrap();
    zip.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
    zip.write_all(header.as_bytes()).unwrap();
    zip.write_all(&vec![0u8; 1 << 20]).unwrap();
    zip.finish().unwrap();
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--inputs", npz.to_str().unwrap()],
        2,
        "input 'image' must have shape [1,3,32,32] but the given array has shape [536870912]",
    );
}

/// Runs `script` in a new user and mount namespace (`unshare -rm`), where it can mount a small
/// tmpfs without privileges. Fails the test when `unshare` is missing.
#[cfg(target_os = "linux")]
fn in_mount_namespace(script: &str, envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-rm", "sh", "-c", script]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("unshare (util-linux) runs")
}

/// Item 5: ENOSPC in TMPDIR was reported as every target crashing (exit 3, "worker exited with
/// code 101"). It is the machine's problem: exit 4, one line naming the disk.
#[cfg(target_os = "linux")]
#[test]
fn a_full_work_directory_is_an_environment_error_naming_the_disk() {
    let dir = tempdir();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let exe = assert_cmd::cargo::cargo_bin("npu-audit");
    let script = format!(
        "mount -t tmpfs -o size=40k tmpfs '{s}' || exit 99; TMPDIR='{s}' '{exe}' compare '{m}' -t cpu -t qnn:sm8650 --layers all",
        s = small.display(),
        exe = exe.display(),
        m = cnn()
    );
    let out = in_mount_namespace(&script, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(99), "cannot mount a tmpfs: {stderr}");
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.to_lowercase().contains("no space left"), "{stderr}");
    assert!(
        stderr.contains(&small.display().to_string()),
        "the line names the disk: {stderr}"
    );
    assert!(!stderr.contains("code 101") && !stderr.contains("panicked"), "{stderr}");
}

/// Item 4: `--save-outputs` on a full disk left a 0-byte `.npz` and printed a stray
/// "ZipWriter drop failed"; the report beside it was still written.
#[cfg(target_os = "linux")]
#[test]
fn saving_outputs_to_a_full_disk_leaves_nothing_behind() {
    let dir = tempdir();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let report = dir.path().join("r.json");
    let exe = assert_cmd::cargo::cargo_bin("npu-audit");
    let script = format!(
        "mount -t tmpfs -o size=12k tmpfs '{s}' || exit 99; '{exe}' compare '{m}' -t cpu -t qnn:sm8650 --save-outputs '{s}/saved' --out '{r}'; code=$?; find '{s}' -mindepth 1 >&2; exit $code",
        s = small.display(),
        exe = exe.display(),
        m = cnn(),
        r = report.display()
    );
    let out = in_mount_namespace(&script, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(99), "cannot mount a tmpfs: {stderr}");
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one error line and no file left on the full disk: {stderr}"
    );
    assert!(
        stderr.contains("--save-outputs") && stderr.contains("no space left"),
        "{stderr}"
    );
    assert!(!stderr.contains("ZipWriter"), "{stderr}");
    assert!(
        !report.exists(),
        "the report was written although the saved outputs were not"
    );
}

/// Item 6: `--input-shape x:0,4` with limits passed on zero elements.
#[test]
fn a_rule_on_an_output_without_elements_fails_as_not_measured() {
    let dir = tempdir();
    let model = dir.path().join("empty.onnx");
    chain_model(&model, &["Relu"], &[0, 4]);
    let (code, report, stderr) = compare_json(&[
        model.to_str().unwrap(),
        "-t",
        "cpu",
        "--no-baseline",
        "--min-sqnr",
        "10",
        "--max-abs",
        "1",
        "--require-bit-exact",
    ]);
    assert_eq!(code, 1, "{stderr}");
    let rules: Vec<&serde_json::Value> = report["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["output"] == "y")
        .collect();
    assert_eq!(rules.len(), 3);
    for r in rules {
        assert_eq!(r["pass"], false, "{r}");
        assert_eq!(r["measured"], "nan", "{r}");
    }
    assert_eq!(output(&report, "cpu", "y")["sqnr_db"], "nan");
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("has no elements")));
}

/// Item 7: NaN in the golden run was not flagged, and the loosest-gate line read `cosine >= inf`.
#[test]
fn nan_in_the_golden_run_is_flagged_and_no_loosest_gate_is_offered() {
    let dir = tempdir();
    let log = dir.path().join("log.onnx");
    let log_abs = dir.path().join("logabs.onnx");
    chain_model(&log, &["Log"], &[1, 64]);
    chain_model(&log_abs, &["Abs", "Log"], &[1, 64]);
    let saved = dir.path().join("saved");
    let json = dir.path().join("r.json");
    let out = run(&[
        "compare",
        log_abs.to_str().unwrap(),
        "--reference",
        log.to_str().unwrap(),
        "-t",
        "cpu",
        "--no-baseline",
        "--gen",
        "uniform:-1,1",
        "--save-outputs",
        saved.to_str().unwrap(),
        "--out",
        json.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The count, from the saved golden outputs.
    let golden = npz_array(&saved.join("golden/s0.npz"), "y");
    let nans = values(&golden).iter().filter(|v| v.is_nan()).count();
    assert!(nans > 0);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let note = format!("output 'y': the golden run itself has {nans} NaN and 0 Inf value(s)");
    assert!(
        report["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(&note)),
        "{:?}",
        report["notes"]
    );
    assert!(table.contains("loosest gate every target passes: none"), "{table}");
    assert!(!table.contains("cosine >= inf"));
}

/// A float32 model `x -> Relu -> y` whose graph also has `extra` outputs computed from `x`:
/// `("name", "Neg")` or a cast `("name", "Cast:11")` to ONNX type 11 (double).
fn model_with_outputs(path: &std::path::Path, y_cast: Option<i32>, extra: &[&str]) {
    use npu_audit::data::model::pb::AttributeProto;
    let mut nodes = vec![node("Relu", "x", "r")];
    let mut outputs = Vec::new();
    match y_cast {
        Some(to) => {
            let mut cast = node("Cast", "r", "y");
            cast.attribute = vec![AttributeProto {
                name: Some("to".into()),
                i: Some(to as i64),
                r#type: Some(2),
                ..Default::default()
            }];
            nodes.push(cast);
            outputs.push(tensor_value_info("y", to, &[1, 8]));
        }
        None => {
            nodes.push(node("Identity", "r", "y"));
            outputs.push(tensor_value_info("y", 1, &[1, 8]));
        }
    }
    for name in extra {
        nodes.push(node("Neg", "x", name));
        outputs.push(tensor_value_info(name, 1, &[1, 8]));
    }
    write_model(path, nodes, vec![tensor_value_info("x", 1, &[1, 8])], outputs);
}

/// Item 7: a reference with extra outputs, or outputs of another element type, was accepted
/// with no note.
#[test]
fn a_reference_with_extra_outputs_or_another_output_type_is_noted() {
    let dir = tempdir();
    let model = dir.path().join("m.onnx");
    let extra = dir.path().join("extra.onnx");
    let double = dir.path().join("double.onnx");
    model_with_outputs(&model, None, &[]);
    model_with_outputs(&extra, None, &["z"]);
    model_with_outputs(&double, Some(11), &[]);
    let notes = |reference: &std::path::Path| {
        let (code, report, stderr) = compare_json(&[
            model.to_str().unwrap(),
            "--reference",
            reference.to_str().unwrap(),
            "-t",
            "cpu",
            "--no-baseline",
        ]);
        assert_eq!(code, 0, "{stderr}");
        (
            report["notes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect::<Vec<_>>(),
            report,
        )
    };
    let (n, _) = notes(&extra);
    assert!(
        n.iter()
            .any(|x| x == "the golden run has outputs the model does not (z): ignored"),
        "{n:?}"
    );
    let (n, report) = notes(&double);
    assert!(
        n.iter()
            .any(|x| x.starts_with("output 'y': the golden run's is float64, the model's float32")),
        "{n:?}"
    );
    assert!(output(&report, "cpu", "y")["bit_identical"].is_null());
}

/// Item 7: a golden manifest listing an output twice was mis-paired by position.
#[test]
fn a_golden_manifest_naming_a_tensor_twice_is_refused() {
    let dir = tempdir();
    let g = dir.path().join("g");
    let out = run(&["golden", "create", &cnn_fp32(), "--out", g.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let path = g.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for s in m["samples"].as_array_mut().unwrap() {
        let first = s["outputs"][0]["name"].clone();
        s["outputs"][1]["name"] = first;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "-t", "cpu"],
        2,
        "the manifest lists output 'logits' twice",
    );
}

/// Item 7: contradictory or empty target lists in a policy were resolved silently.
#[test]
fn a_policy_that_contradicts_itself_or_lists_no_target_is_refused() {
    let dir = tempdir();
    let p = dir.path().join("npu-audit.toml");
    std::fs::write(
        &p,
        "allow_failure = [\"qnn:*\"]\n\n[target.\"qnn:sm8650\"]\nallow_failure = false\n",
    )
    .unwrap();
    fails_with(
        &["check-config", p.to_str().unwrap()],
        2,
        "npu-audit.toml:4:17: allow_failure = false here, but the top-level allow_failure = [\"qnn:*\"] lets qnn:sm8650 fail",
    );
    std::fs::write(&p, "targets = []\n").unwrap();
    fails_with(
        &["check-config", p.to_str().unwrap()],
        2,
        "npu-audit.toml:1:11: targets = [] names no target",
    );
}

/// Process ids of the processes whose command line mentions `needle`.
#[cfg(target_os = "linux")]
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// Item 8: when the audit was SIGKILLed its workers ran on and its work directory stayed.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_audit_takes_its_workers_with_it_and_the_next_one_sweeps_its_work_directory() {
    use std::time::{Duration, Instant};
    let tmp = tempdir();
    let mut child = spawn_hanging_audit(tmp.path());
    let work_dirs = || work_dirs(tmp.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    let work = loop {
        let found = work_dirs().into_iter().find(|w| w.join("targets").is_dir());
        if let Some(w) = found.filter(|w| !processes_mentioning(&format!("{}/targets", w.display())).is_empty()) {
            break w;
        }
        assert!(Instant::now() < deadline, "no worker started");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) on the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    child.wait().unwrap();
    let needle = format!("{}/targets", work.display());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_mentioning(&needle).is_empty() {
        assert!(Instant::now() < deadline, "the worker outlived the killed audit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        work.is_dir(),
        "nothing to sweep: the killed audit had no chance to clean up"
    );
    let out = bin()
        .env("TMPDIR", tmp.path())
        .args(["compare", &cnn(), "-t", "cpu", "--no-baseline"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        work_dirs().is_empty(),
        "stale work directories remain: {:?}",
        work_dirs()
    );
}

/// Item 9: error lines echoed escape sequences from tensor names in the model verbatim.
#[test]
fn error_lines_show_escape_sequences_from_the_model_escaped() {
    let dir = tempdir();
    let model = dir.path().join("m.onnx");
    let evil = "x\u{1b}]0;owned\u{7}\u{1b}[2J";
    write_model(
        &model,
        vec![node("Relu", evil, "y")],
        vec![tensor_value_info(evil, 1, &[1, 4])],
        vec![tensor_value_info("y", 1, &[1, 4])],
    );
    let out = run(&[
        "compare",
        model.to_str().unwrap(),
        "-t",
        "cpu",
        "--gen",
        "nope=uniform:-1,1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !out.stderr.contains(&0x1b) && !out.stderr.contains(&0x07),
        "raw control bytes on stderr"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("x\\u{1b}]0;owned\\u{7}\\u{1b}[2J"), "{stderr}");
}

/// Item 10: smaller messages that named the wrong thing.
#[cfg(unix)]
#[test]
fn messages_name_the_flag_and_file_at_fault() {
    let dir = tempdir();
    fails_with(&["check-config", dir.path().to_str().unwrap()], 2, "is a directory");
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--runtime", "cpu=/etc/passwd"],
        2,
        "--runtime cpu=/etc/passwd: /etc/passwd is not a shared library",
    );
    // Re-running a shard into the same --out names --out, not a flag the user never passed.
    let r = dir.path().join("shard.json");
    let args = [
        "compare",
        &cnn(),
        "-t",
        "cpu",
        "--shard",
        "1/1",
        "--out",
        r.to_str().unwrap(),
    ];
    assert_eq!(run(&args).status.code(), Some(0));
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--out {}: the shard's outputs directory", r.display())),
        "{stderr}"
    );
    assert!(!stderr.contains("--save-outputs"), "{stderr}");
    // A golden file that is a link to a device is not "missing".
    let g = dir.path().join("g");
    assert_eq!(
        run(&["golden", "create", &cnn_fp32(), "--out", g.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let file = g.join("outputs/s0/o0.npy");
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/dev/null", &file).unwrap();
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "-t", "cpu"],
        2,
        "outputs/s0/o0.npy is a character device, not a regular file",
    );
}

/// Item 11: the README's test command needed Chromium installed by hand and stopped at the first
/// failing test binary.
#[test]
fn the_readme_test_command_provisions_what_the_tests_need_and_runs_every_binary() {
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    assert!(
        readme.contains("```console\n$ scripts/test\n```"),
        "README.md gives scripts/test as the test command"
    );
    let script = std::fs::read_to_string(repo("scripts/test")).unwrap();
    // apt_get: apt-get waiting for another apt's lock (scripts/apt-wait.sh).
    assert!(script.contains("apt_get install") && script.contains("chromium"));
    assert!(script.contains("cargo test --no-fail-fast"));
    let ci = std::fs::read_to_string(repo(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "scripts/test"),
        ".ci/run calls the README's test command"
    );
    let html_test = std::fs::read_to_string(repo("tests/it/html_report.rs")).unwrap();
    assert!(
        !html_test.contains("SKIP_BROWSER"),
        "the browser test has no way to skip itself"
    );
}

/// Item 8: a SIGKILL while a runtime was being fetched left an orphaned `pip` and its ~100 MB
/// temporary directory in the cache. A stand-in Python (`NPU_AUDIT_PYTHON`) whose `pip download`
/// hangs plays the slow download; the cache is the test's own.
#[cfg(target_os = "linux")]
#[test]
fn a_fetch_killed_midway_leaves_no_pip_running_and_its_temporary_directory_is_swept() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};
    let dir = tempdir();
    let cache = dir.path().join("cache");
    let python = dir.path().join("python");
    let pid_file = dir.path().join("pip.pid");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  --version) echo 'Python 3.11.0' ;;\n  '-m pip --version') echo 'pip 24' ;;\n  '-m pip download'*)\n    [ -n \"$FAKE_PIP_FAIL\" ] && {{ echo 'ERROR: no network' >&2; exit 1; }}\n    echo $$ > '{}'; exec sleep 300 ;;\n  *) echo '{{\"packages\": {{}}, \"dirs\": []}}' ;;\nesac\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let audit = || {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"));
        cmd.env("NPU_AUDIT_PYTHON", &python)
            .env("NPU_AUDIT_CACHE", &cache)
            .env_remove("NPU_AUDIT_RUNTIME_CPU")
            .args(["compare", &cnn(), "-t", "cpu", "--no-baseline"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let mut child = audit().spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "pip download never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let pip: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) on the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: kill(pid, 0) only asks whether the process exists.
    while unsafe { libc::kill(pip, 0) } == 0
        && !std::fs::read_to_string(format!("/proc/{pip}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(Instant::now() < deadline, "pip outlived the killed audit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let fetch_dirs = || -> Vec<String> {
        std::fs::read_dir(cache.join("runtimes"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                    .filter(|n| n.starts_with(".fetch-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        !fetch_dirs().is_empty(),
        "the killed fetch left no temporary directory to sweep"
    );
    let out = audit().env("FAKE_PIP_FAIL", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no network"));
    assert!(fetch_dirs().is_empty(), "left in the cache: {:?}", fetch_dirs());
}

/// `scripts/test` failed at once when another apt process held dpkg's or the package lists'
/// lock. A stand-in `apt-get` (first on `PATH`, with no Chromium there) reports the lists' lock
/// held on its first `update` and dpkg's lock held on an `install` that would not wait; a stand-in
/// `cargo` ends the script. The script must wait for both and go on to the tests.
#[cfg(unix)]
#[test]
fn the_test_script_waits_for_an_apt_lock_held_by_another_process() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let log = dir.path().join("calls.log");
    let script = |name: &str, text: String| {
        let p = bin_dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(
        "apt-get",
        format!(
            "#!/bin/sh\necho \"apt-get $*\" >> '{log}'\ncase \"$*\" in\n  *update*)\n    \
             if [ ! -e '{log}.updated' ]; then : > '{log}.updated'; \
             echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)' >&2; \
             echo 'E: Unable to lock directory /var/lib/apt/lists/' >&2; exit 100; fi ;;\n  \
             *install*)\n    case \"$*\" in *DPkg::Lock::Timeout=*) ;; *) \
             echo 'E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)' >&2; \
             exit 100 ;; esac ;;\nesac\nexit 0\n",
            log = log.display()
        ),
    );
    script(
        "cargo",
        format!("#!/bin/sh\necho \"cargo $*\" >> '{}'\n", log.display()),
    );
    // The script's own tools, and no chromium.
    for tool in ["bash", "dirname", "id", "sleep", "grep", "cat", "env"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {tool}"));
        std::os::unix::fs::symlink(found, bin_dir.join(tool)).unwrap();
    }
    let out = std::process::Command::new(repo("scripts/test"))
        .env("PATH", &bin_dir)
        .env_remove("NPU_AUDIT_CHROMIUM")
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}\ncalls:\n{calls}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.contains(" update")).count(),
        2,
        "update is tried again after the lock is released: {calls}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("install") && l.contains("chromium") && l.contains("DPkg::Lock::Timeout=600")),
        "{calls}"
    );
    assert_eq!(lines.last(), Some(&"cargo test --no-fail-fast"), "{calls}");
}

/// A child process killed when the test is done with it, or panics.
#[cfg(unix)]
struct KillOnDrop(std::process::Child);

#[cfg(unix)]
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `matrix` and `pipeline` killed with SIGKILL left their `npu-audit-matrix-*` and
/// `npu-audit-pipeline-*` directories in TMPDIR for good: unlike compare's, they carried no owner
/// marker, so no later audit swept them. Each is killed inside its first audit (its cpu worker
/// hangs), then a plain compare runs in the same TMPDIR and must leave nothing behind.
#[cfg(unix)]
#[test]
fn directories_of_a_killed_matrix_or_pipeline_are_swept_by_the_next_audit() {
    use std::time::{Duration, Instant};
    let stage = |name: &str, model: &str, feeds: &str| {
        format!(
            "[[stage]]\nname = \"{name}\"\nmodel = \"{}\"\n{feeds}\n",
            repo("fixtures/real").join(model).display()
        )
    };
    let dir = tempdir();
    let pipeline = dir.path().join("p.toml");
    std::fs::write(
        &pipeline,
        stage("a", "ppocr_cls_stage1_qdq_u8.onnx", "")
            + &stage(
                "b",
                "ppocr_cls_stage2_qdq_u8.onnx",
                "feeds = { features = \"a.features\" }",
            ),
    )
    .unwrap();
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let variant = format!("u8={}", cnn());
    let inputs = repo("fixtures/inputs/ppocr_seed3.npz");
    // A pipeline keeps its stages' inputs in memory and makes no directory of its own: only its
    // compares' work directories, which must be swept too.
    let commands = [
        (
            "npu-audit-matrix-",
            strings(&["matrix", "--variant", &variant, "-t", "cpu", "--reference", &cnn_fp32()]),
        ),
        (
            "npu-audit-",
            strings(&[
                "pipeline",
                pipeline.to_str().unwrap(),
                "-t",
                "cpu",
                "--inputs",
                inputs.to_str().unwrap(),
            ]),
        ),
    ];
    for (prefix, args) in commands {
        let tmp = tempdir();
        // Killed however the test ends: its worker hangs on purpose.
        let mut child = KillOnDrop(
            std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
                .env("TMPDIR", tmp.path())
                .env("NPU_AUDIT_FAULT_INJECT", "cpu=hang")
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let named = |p: &str| -> Vec<std::path::PathBuf> {
            work_dirs(tmp.path())
                .into_iter()
                .filter(|d| d.file_name().unwrap().to_string_lossy().starts_with(p))
                .collect()
        };
        // Inside its first audit: its own directory (the matrix's) and a compare's work directory.
        let wanted = if args[0] == "matrix" { 2 } else { 1 };
        let deadline = Instant::now() + Duration::from_secs(120);
        while named(prefix).is_empty() || work_dirs(tmp.path()).len() < wanted {
            assert!(Instant::now() < deadline, "{prefix}: the audit never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        assert!(!named(prefix).is_empty(), "{prefix}: nothing was left to sweep");
        assert!(
            named("npu-audit-pipeline-").is_empty(),
            "a pipeline made a directory of its own"
        );
        let out = bin()
            .env("TMPDIR", tmp.path())
            .args(["compare", &cnn(), "-t", "cpu", "--no-baseline"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            work_dirs(tmp.path()),
            Vec::<std::path::PathBuf>::new(),
            "{prefix}: left behind"
        );
    }
}
