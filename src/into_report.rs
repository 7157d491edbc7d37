//! The boundary between the layers that run and read things and the reports that state them:
//! each wire type of the execution layer (`crate::exec`), each type of the device-report parser
//! (`crate::device`) and each fact of the layers below (host, model, inputs, target, timings)
//! becomes its report twin (`crate::report::{run, device, facts}`) here,
//! field by field, so a field added on either side does not compile until this says where it goes.

use crate::report::device::{
    DeviceInfo, Fallback, Identity, IdentityStatus, LogFindings, OutputFile, Placement, QnnError, ReportFormat,
    Spelling, UnsupportedNode,
};
use crate::report::facts::{
    AuditPhase, Dependence, ExternalFile, HostInfo, InputProvenance, TargetHost, TargetRole, TensorSummary,
};
use crate::report::run::{ContextUse, Phase, RepeatDifference, RunStatus};

impl From<crate::exec::RunStatus> for RunStatus {
    fn from(v: crate::exec::RunStatus) -> RunStatus {
        match v {
            crate::exec::RunStatus::Ok => RunStatus::Ok,
            crate::exec::RunStatus::Failed => RunStatus::Failed,
            crate::exec::RunStatus::Crashed => RunStatus::Crashed,
            crate::exec::RunStatus::Timeout => RunStatus::Timeout,
            crate::exec::RunStatus::Unavailable => RunStatus::Unavailable,
        }
    }
}

impl From<crate::exec::job::Phase> for Phase {
    fn from(v: crate::exec::job::Phase) -> Phase {
        match v {
            crate::exec::job::Phase::LoadRuntime => Phase::LoadRuntime,
            crate::exec::job::Phase::RegisterEp => Phase::RegisterEp,
            crate::exec::job::Phase::CreateSession => Phase::CreateSession,
            crate::exec::job::Phase::Run => Phase::Run,
            crate::exec::job::Phase::WriteOutputs => Phase::WriteOutputs,
            crate::exec::job::Phase::Done => Phase::Done,
        }
    }
}

impl From<crate::exec::job::ContextUse> for ContextUse {
    fn from(v: crate::exec::job::ContextUse) -> ContextUse {
        match v {
            crate::exec::job::ContextUse::Compiled => ContextUse::Compiled,
            crate::exec::job::ContextUse::Loaded => ContextUse::Loaded,
            crate::exec::job::ContextUse::Recompiled => ContextUse::Recompiled,
            crate::exec::job::ContextUse::Uncached => ContextUse::Uncached,
        }
    }
}

impl From<crate::exec::job::RepeatDifference> for RepeatDifference {
    fn from(v: crate::exec::job::RepeatDifference) -> RepeatDifference {
        let crate::exec::job::RepeatDifference {
            sample,
            run,
            output,
            differing,
            elements,
        } = v;
        RepeatDifference {
            sample,
            run,
            output,
            differing,
            elements,
        }
    }
}

impl From<crate::device::DeviceInfo> for DeviceInfo {
    fn from(v: crate::device::DeviceInfo) -> DeviceInfo {
        let crate::device::DeviceInfo {
            manufacturer,
            device_model,
            soc_model,
            board_platform,
            chipset,
            os,
            app_version,
            onnxruntime_version,
            ep,
            ep_options,
            qnn_release,
            model_sha256,
            unknown_keys,
        } = v;
        DeviceInfo {
            manufacturer,
            device_model,
            soc_model,
            board_platform,
            chipset,
            os,
            app_version,
            onnxruntime_version,
            ep,
            ep_options,
            qnn_release,
            model_sha256,
            unknown_keys,
        }
    }
}

impl From<crate::device::IdentityStatus> for IdentityStatus {
    fn from(v: crate::device::IdentityStatus) -> IdentityStatus {
        match v {
            crate::device::IdentityStatus::Identified => IdentityStatus::Identified,
            crate::device::IdentityStatus::NotSimulated => IdentityStatus::NotSimulated,
            crate::device::IdentityStatus::Ambiguous => IdentityStatus::Ambiguous,
            crate::device::IdentityStatus::Contradictory => IdentityStatus::Contradictory,
            crate::device::IdentityStatus::Unknown => IdentityStatus::Unknown,
        }
    }
}

impl From<crate::device::Identity> for Identity {
    fn from(v: crate::device::Identity) -> Identity {
        let crate::device::Identity {
            status,
            chipset,
            sentence,
        } = v;
        Identity {
            status: status.into(),
            chipset,
            sentence,
        }
    }
}

impl From<crate::device::ReportFormat> for ReportFormat {
    fn from(v: crate::device::ReportFormat) -> ReportFormat {
        match v {
            crate::device::ReportFormat::Directory => ReportFormat::Directory,
            crate::device::ReportFormat::Zip => ReportFormat::Zip,
            crate::device::ReportFormat::QnnNetRun => ReportFormat::QnnNetRun,
            crate::device::ReportFormat::AiHub => ReportFormat::AiHub,
        }
    }
}

impl From<crate::device::logs::LogFindings> for LogFindings {
    fn from(v: crate::device::logs::LogFindings) -> LogFindings {
        let crate::device::logs::LogFindings {
            lines_read,
            qnn_errors,
            backend_failure,
            fallback,
            placements,
            execution_providers,
            qnn_backend,
            htp_arch,
            soc_model,
            qnn_api_version,
            qnn_sdk_build,
            qnn_release,
            ort_version,
            evidence,
            contradictions,
        } = v;
        LogFindings {
            lines_read,
            qnn_errors: qnn_errors.into_iter().map(Into::into).collect(),
            backend_failure,
            fallback: fallback.into(),
            placements: placements.into_iter().map(Into::into).collect(),
            execution_providers,
            qnn_backend,
            htp_arch,
            soc_model,
            qnn_api_version,
            qnn_sdk_build,
            qnn_release,
            ort_version,
            evidence,
            contradictions,
        }
    }
}

impl From<crate::device::logs::QnnError> for QnnError {
    fn from(v: crate::device::logs::QnnError) -> QnnError {
        let crate::device::logs::QnnError {
            code,
            name,
            meaning,
            count,
            line,
        } = v;
        QnnError {
            code,
            name,
            meaning,
            count,
            line,
        }
    }
}

impl From<crate::device::logs::Fallback> for Fallback {
    fn from(v: crate::device::logs::Fallback) -> Fallback {
        let crate::device::logs::Fallback {
            partitions,
            nodes_total,
            nodes_on_qnn,
            nodes_on_cpu,
            unsupported_nodes,
            unsupported_count,
            fallback_disabled,
        } = v;
        Fallback {
            partitions,
            nodes_total,
            nodes_on_qnn,
            nodes_on_cpu,
            unsupported_nodes: unsupported_nodes.into_iter().map(Into::into).collect(),
            unsupported_count,
            fallback_disabled,
        }
    }
}

impl From<crate::device::logs::UnsupportedNode> for UnsupportedNode {
    fn from(v: crate::device::logs::UnsupportedNode) -> UnsupportedNode {
        let crate::device::logs::UnsupportedNode { op_type, node, reason } = v;
        UnsupportedNode { op_type, node, reason }
    }
}

impl From<crate::device::logs::Placement> for Placement {
    fn from(v: crate::device::logs::Placement) -> Placement {
        let crate::device::logs::Placement { ep, nodes } = v;
        Placement { ep, nodes }
    }
}

impl From<crate::device::spelling::Spelling> for Spelling {
    fn from(v: crate::device::spelling::Spelling) -> Spelling {
        match v {
            crate::device::spelling::Spelling::Sanitized => Spelling::Sanitized,
            crate::device::spelling::Spelling::Collapsed => Spelling::Collapsed,
            crate::device::spelling::Spelling::SlashAsUnderscore => Spelling::SlashAsUnderscore,
            crate::device::spelling::Spelling::AsNamed => Spelling::AsNamed,
            crate::device::spelling::Spelling::Subdirectories => Spelling::Subdirectories,
        }
    }
}

impl From<crate::device::spelling::OutputFile> for OutputFile {
    fn from(v: crate::device::spelling::OutputFile) -> OutputFile {
        let crate::device::spelling::OutputFile { output, file, spelling } = v;
        OutputFile {
            output,
            file,
            spelling: spelling.into(),
        }
    }
}

impl From<crate::host::HostInfo> for HostInfo {
    fn from(v: crate::host::HostInfo) -> HostInfo {
        let crate::host::HostInfo {
            cpu,
            isa,
            isa_class,
            os,
            arch,
        } = v;
        HostInfo {
            cpu,
            isa,
            isa_class,
            os,
            arch,
        }
    }
}

impl From<crate::host::Dependence> for Dependence {
    fn from(v: crate::host::Dependence) -> Dependence {
        match v {
            crate::host::Dependence::Measured => Dependence::Measured,
            crate::host::Dependence::Possible => Dependence::Possible,
            crate::host::Dependence::Independent => Dependence::Independent,
        }
    }
}

impl From<crate::host::TargetHost> for TargetHost {
    fn from(v: crate::host::TargetHost) -> TargetHost {
        let crate::host::TargetHost {
            dependence,
            isa_class,
            isa_cap,
            why,
        } = v;
        TargetHost {
            dependence: dependence.into(),
            isa_class,
            isa_cap,
            why,
        }
    }
}

impl From<&crate::model::signature::TensorInfo> for TensorSummary {
    /// A tensor as the report states it: fixed dimensions as numbers, dynamic ones by their symbol.
    fn from(t: &crate::model::signature::TensorInfo) -> TensorSummary {
        use crate::model::signature::Dim;
        let shape = t.dims.as_ref().map(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(n) => serde_json::Value::from(*n),
                    other => serde_json::Value::from(other.to_string()),
                })
                .collect()
        });
        TensorSummary {
            name: t.name.clone(),
            dtype: t.dtype.name().to_string(),
            shape,
        }
    }
}

impl From<crate::model::load::ExternalFile> for ExternalFile {
    fn from(v: crate::model::load::ExternalFile) -> ExternalFile {
        let crate::model::load::ExternalFile { file, sha256 } = v;
        ExternalFile { file, sha256 }
    }
}

impl From<crate::inputs::InputProvenance> for InputProvenance {
    fn from(v: crate::inputs::InputProvenance) -> InputProvenance {
        let crate::inputs::InputProvenance {
            source,
            samples,
            generators,
            seed,
            files,
        } = v;
        InputProvenance {
            source,
            samples,
            generators,
            seed,
            files,
        }
    }
}

impl From<crate::target::TargetRole> for TargetRole {
    fn from(v: crate::target::TargetRole) -> TargetRole {
        match v {
            crate::target::TargetRole::Target => TargetRole::Target,
            crate::target::TargetRole::Baseline => TargetRole::Baseline,
        }
    }
}

impl From<crate::timings::Phase> for AuditPhase {
    fn from(v: crate::timings::Phase) -> AuditPhase {
        match v {
            crate::timings::Phase::Provision => AuditPhase::Provision,
            crate::timings::Phase::Prepare => AuditPhase::Prepare,
            crate::timings::Phase::Rewrite => AuditPhase::Rewrite,
            crate::timings::Phase::WriteModels => AuditPhase::WriteModels,
            crate::timings::Phase::Sessions => AuditPhase::Sessions,
            crate::timings::Phase::ReadTensors => AuditPhase::ReadTensors,
            crate::timings::Phase::Matching => AuditPhase::Matching,
            crate::timings::Phase::Compare => AuditPhase::Compare,
            crate::timings::Phase::Persist => AuditPhase::Persist,
            crate::timings::Phase::Render => AuditPhase::Render,
            crate::timings::Phase::Other => AuditPhase::Other,
        }
    }
}
