//! The one place that pins which official ONNX Runtime build carries which execution provider, at
//! which version, and where its libraries sit inside the Python wheel that ships it.

/// How a build is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A complete ONNX Runtime (`libonnxruntime`), loaded into a worker process.
    Standalone,
    /// An execution-provider plugin library registered into the named standalone build.
    PluginOn(&'static str),
}

/// One pinned official build.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    /// Short key used on the command line (`--runtime cpu=...`) and in the cache.
    pub key: &'static str,
    /// Python package (wheel) that ships it.
    pub package: &'static str,
    pub version: &'static str,
    pub role: Role,
    /// Environment variable that points at the library (or its directory).
    pub env_var: &'static str,
    /// `(os, arch)` pairs the wheel exists for and the EP can run on.
    pub platforms: &'static [(&'static str, &'static str)],
    /// Why the build cannot run on other platforms.
    pub platform_reason: &'static str,
}

const LINUX_X64: (&str, &str) = ("linux", "x86_64");

/// ONNX Runtime with the CPU EP; also the host of the QNN plugin.
pub const CPU: Build = Build {
    key: "cpu",
    package: "onnxruntime",
    version: "1.31.1",
    role: Role::Standalone,
    env_var: "NPU_AUDIT_RUNTIME_CPU",
    platforms: &[
        LINUX_X64,
        ("linux", "aarch64"),
        ("macos", "aarch64"),
        ("windows", "x86_64"),
        ("windows", "aarch64"),
    ],
    platform_reason: "the onnxruntime wheel is not published for this platform",
};

/// The QNN execution provider plugin (HTP backend; Qualcomm's HTP simulator on x86-64 Linux).
pub const QNN: Build = Build {
    key: "qnn",
    package: "onnxruntime-qnn",
    version: "2.7.0",
    role: Role::PluginOn("cpu"),
    env_var: "NPU_AUDIT_RUNTIME_QNN",
    platforms: &[LINUX_X64, ("windows", "aarch64")],
    platform_reason: "QNN HTP needs Linux x86-64 (Qualcomm's HTP simulator) or Windows on Snapdragon",
};

/// A separate ONNX Runtime build with the OpenVINO EP built in.
pub const OPENVINO: Build = Build {
    key: "openvino",
    package: "onnxruntime-openvino",
    version: "1.24.1",
    role: Role::Standalone,
    env_var: "NPU_AUDIT_RUNTIME_OPENVINO",
    platforms: &[LINUX_X64, ("windows", "x86_64")],
    platform_reason: "OpenVINO needs an x86-64 Linux or Windows machine",
};

/// ONNX Runtime with the DirectML EP (Windows only).
pub const DIRECTML: Build = Build {
    key: "directml",
    package: "onnxruntime-directml",
    version: "1.24.4",
    role: Role::Standalone,
    env_var: "NPU_AUDIT_RUNTIME_DIRECTML",
    platforms: &[("windows", "x86_64"), ("windows", "aarch64")],
    platform_reason: "DirectML needs Windows",
};

/// ONNX Runtime with the CUDA and TensorRT EPs.
pub const GPU: Build = Build {
    key: "gpu",
    package: "onnxruntime-gpu",
    version: "1.31.1",
    role: Role::Standalone,
    env_var: "NPU_AUDIT_RUNTIME_GPU",
    platforms: &[LINUX_X64, ("windows", "x86_64")],
    platform_reason: "CUDA and TensorRT need an x86-64 Linux or Windows machine with an NVIDIA GPU",
};

/// Every build the audit knows.
pub const BUILDS: &[Build] = &[CPU, QNN, OPENVINO, DIRECTML, GPU];

impl Build {
    /// Looks a build up by key.
    pub fn get(key: &str) -> Option<&'static Build> {
        BUILDS.iter().find(|b| b.key == key)
    }

    /// Whether the build exists for the machine this runs on.
    pub fn supports_this_platform(&self) -> bool {
        self.platforms.contains(&(std::env::consts::OS, std::env::consts::ARCH))
    }

    /// Why the build is of no use on this machine, if it is not: no wheel for the platform, or (the
    /// GPU build) no NVIDIA driver.
    pub fn obstacle(&self) -> Option<String> {
        if !self.supports_this_platform() {
            return Some(self.platform_reason.to_string());
        }
        if self.key == GPU.key && !nvidia_driver_present() {
            return Some("no NVIDIA GPU driver found (CUDA and TensorRT need an NVIDIA GPU)".into());
        }
        None
    }

    /// Path of the main library inside the wheel on this platform.
    pub fn main_lib(&self) -> String {
        let os = std::env::consts::OS;
        match (self.role, os) {
            (Role::PluginOn(_), "windows") => "onnxruntime_qnn/onnxruntime_providers_qnn.dll".into(),
            (Role::PluginOn(_), _) => "onnxruntime_qnn/libonnxruntime_providers_qnn.so".into(),
            (Role::Standalone, "windows") => "onnxruntime/capi/onnxruntime.dll".into(),
            (Role::Standalone, "macos") => {
                format!("onnxruntime/capi/libonnxruntime.{}.dylib", self.version)
            }
            (Role::Standalone, _) => format!("onnxruntime/capi/libonnxruntime.so.{}", self.version),
        }
    }

    /// File name of the main library (what to look for in a directory given by the user).
    pub fn main_lib_name(&self) -> String {
        let lib = self.main_lib();
        lib.rsplit('/').next().unwrap_or(&lib).to_string()
    }

    /// "onnxruntime-qnn 2.7.0".
    pub fn label(&self) -> String {
        format!("{} {}", self.package, self.version)
    }
}

fn nvidia_driver_present() -> bool {
    if cfg!(windows) {
        std::path::Path::new("C:\\Windows\\System32\\nvcuda.dll").exists()
    } else {
        std::path::Path::new("/proc/driver/nvidia/version").exists()
    }
}

/// QNN backend library that sits beside the QNN plugin (the HTP backend; on x86-64 Linux it
/// contains Qualcomm's HTP simulator).
pub fn qnn_htp_backend_name() -> &'static str {
    if cfg!(windows) {
        "QnnHtp.dll"
    } else {
        "libQnnHtp.so"
    }
}

/// Whether a file name inside a wheel is a shared library worth extracting.
pub fn is_shared_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    // The Python bindings are not needed: the audit loads the C API library directly.
    if name.contains("pybind11") || name.contains("cpython") {
        return false;
    }
    name.ends_with(".dll") || name.ends_with(".dylib") || name.ends_with(".so") || name.contains(".so.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plugin_names_a_standalone_host() {
        for b in BUILDS {
            if let Role::PluginOn(host) = b.role {
                assert_eq!(Build::get(host).unwrap().role, Role::Standalone);
            }
        }
    }

    #[test]
    fn shared_libraries_are_recognised() {
        assert!(is_shared_library("onnxruntime/capi/libonnxruntime.so.1.31.1"));
        assert!(is_shared_library("onnxruntime_qnn.libs/libc++-71bc274c.so.1.0"));
        assert!(is_shared_library("onnxruntime/capi/onnxruntime.dll"));
        assert!(!is_shared_library("onnxruntime/capi/onnxruntime_validation.py"));
        assert!(!is_shared_library("onnxruntime_qnn/Qualcomm_LICENSE.pdf"));
        assert!(!is_shared_library(
            "onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so"
        ));
    }
}
