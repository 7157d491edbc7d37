//! The boundary between the layers that run and read things and the reports that state them:
//! each wire type of the execution layer (`crate::execution::exec`), each type of the device-report parser
//! (`crate::data::device`) and each fact of the layers below (host, model, inputs, target, timings)
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

impl From<crate::execution::exec::RunStatus> for RunStatus {
    fn from(v: crate::execution::exec::RunStatus) -> RunStatus {
        match v {
            crate::execution::exec::RunStatus::Ok => RunStatus::Ok,
            crate::execution::exec::RunStatus::Failed => RunStatus::Failed,
            crate::execution::exec::RunStatus::Crashed => RunStatus::Crashed,
            crate::execution::exec::RunStatus::Timeout => RunStatus::Timeout,
            crate::execution::exec::RunStatus::Unavailable => RunStatus::Unavailable,
        }
    }
}

impl From<crate::execution::exec::job::Phase> for Phase {
    fn from(v: crate::execution::exec::job::Phase) -> Phase {
        match v {
            crate::execution::exec::job::Phase::LoadRuntime => Phase::LoadRuntime,
            crate::execution::exec::job::Phase::RegisterEp => Phase::RegisterEp,
            crate::execution::exec::job::Phase::CreateSession => Phase::CreateSession,
            crate::execution::exec::job::Phase::Run => Phase::Run,
            crate::execution::exec::job::Phase::WriteOutputs => Phase::WriteOutputs,
            crate::execution::exec::job::Phase::Done => Phase::Done,
        }
    }
}

impl From<crate::execution::exec::job::ContextUse> for ContextUse {
    fn from(v: crate::execution::exec::job::ContextUse) -> ContextUse {
        match v {
            crate::execution::exec::job::ContextUse::Compiled => ContextUse::Compiled,
            crate::execution::exec::job::ContextUse::Loaded => ContextUse::Loaded,
            crate::execution::exec::job::ContextUse::Recompiled => ContextUse::Recompiled,
            crate::execution::exec::job::ContextUse::Uncached => ContextUse::Uncached,
        }
    }
}

impl From<crate::execution::exec::job::RepeatDifference> for RepeatDifference {
    fn from(v: crate::execution::exec::job::RepeatDifference) -> RepeatDifference {
        let crate::execution::exec::job::RepeatDifference {
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

impl From<crate::data::device::DeviceInfo> for DeviceInfo {
    fn from(v: crate::data::device::DeviceInfo) -> DeviceInfo {
        let crate::data::device::DeviceInfo {
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

impl From<crate::data::device::IdentityStatus> for IdentityStatus {
    fn from(v: crate::data::device::IdentityStatus) -> IdentityStatus {
        match v {
            crate::data::device::IdentityStatus::Identified => IdentityStatus::Identified,
            crate::data::device::IdentityStatus::NotSimulated => IdentityStatus::NotSimulated,
            crate::data::device::IdentityStatus::Ambiguous => IdentityStatus::Ambiguous,
            crate::data::device::IdentityStatus::Contradictory => IdentityStatus::Contradictory,
            crate::data::device::IdentityStatus::Unknown => IdentityStatus::Unknown,
        }
    }
}

impl From<crate::data::device::Identity> for Identity {
    fn from(v: crate::data::device::Identity) -> Identity {
        let crate::data::device::Identity {
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

impl From<crate::data::device::ReportFormat> for ReportFormat {
    fn from(v: crate::data::device::ReportFormat) -> ReportFormat {
        match v {
            crate::data::device::ReportFormat::Directory => ReportFormat::Directory,
            crate::data::device::ReportFormat::Zip => ReportFormat::Zip,
            crate::data::device::ReportFormat::QnnNetRun => ReportFormat::QnnNetRun,
            crate::data::device::ReportFormat::AiHub => ReportFormat::AiHub,
        }
    }
}

impl From<crate::data::device::logs::LogFindings> for LogFindings {
    fn from(v: crate::data::device::logs::LogFindings) -> LogFindings {
        let crate::data::device::logs::LogFindings {
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

impl From<crate::data::device::logs::QnnError> for QnnError {
    fn from(v: crate::data::device::logs::QnnError) -> QnnError {
        let crate::data::device::logs::QnnError {
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

impl From<crate::data::device::logs::Fallback> for Fallback {
    fn from(v: crate::data::device::logs::Fallback) -> Fallback {
        let crate::data::device::logs::Fallback {
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

impl From<crate::data::device::logs::UnsupportedNode> for UnsupportedNode {
    fn from(v: crate::data::device::logs::UnsupportedNode) -> UnsupportedNode {
        let crate::data::device::logs::UnsupportedNode { op_type, node, reason } = v;
        UnsupportedNode { op_type, node, reason }
    }
}

impl From<crate::data::device::logs::Placement> for Placement {
    fn from(v: crate::data::device::logs::Placement) -> Placement {
        let crate::data::device::logs::Placement { ep, nodes } = v;
        Placement { ep, nodes }
    }
}

impl From<crate::data::device::spelling::Spelling> for Spelling {
    fn from(v: crate::data::device::spelling::Spelling) -> Spelling {
        match v {
            crate::data::device::spelling::Spelling::Sanitized => Spelling::Sanitized,
            crate::data::device::spelling::Spelling::Collapsed => Spelling::Collapsed,
            crate::data::device::spelling::Spelling::SlashAsUnderscore => Spelling::SlashAsUnderscore,
            crate::data::device::spelling::Spelling::AsNamed => Spelling::AsNamed,
            crate::data::device::spelling::Spelling::Subdirectories => Spelling::Subdirectories,
        }
    }
}

impl From<crate::data::device::spelling::OutputFile> for OutputFile {
    fn from(v: crate::data::device::spelling::OutputFile) -> OutputFile {
        let crate::data::device::spelling::OutputFile { output, file, spelling } = v;
        OutputFile {
            output,
            file,
            spelling: spelling.into(),
        }
    }
}

impl From<crate::foundation::host::HostInfo> for HostInfo {
    fn from(v: crate::foundation::host::HostInfo) -> HostInfo {
        let crate::foundation::host::HostInfo {
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

impl From<crate::foundation::host::Dependence> for Dependence {
    fn from(v: crate::foundation::host::Dependence) -> Dependence {
        match v {
            crate::foundation::host::Dependence::Measured => Dependence::Measured,
            crate::foundation::host::Dependence::Possible => Dependence::Possible,
            crate::foundation::host::Dependence::Independent => Dependence::Independent,
        }
    }
}

impl From<crate::foundation::host::TargetHost> for TargetHost {
    fn from(v: crate::foundation::host::TargetHost) -> TargetHost {
        let crate::foundation::host::TargetHost {
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

impl From<&crate::data::model::signature::TensorInfo> for TensorSummary {
    /// A tensor as the report states it: fixed dimensions as numbers, dynamic ones by their symbol.
    fn from(t: &crate::data::model::signature::TensorInfo) -> TensorSummary {
        use crate::data::model::signature::Dim;
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

impl From<crate::data::model::load::ExternalFile> for ExternalFile {
    fn from(v: crate::data::model::load::ExternalFile) -> ExternalFile {
        let crate::data::model::load::ExternalFile { file, sha256 } = v;
        ExternalFile { file, sha256 }
    }
}

impl From<crate::data::inputs::InputProvenance> for InputProvenance {
    fn from(v: crate::data::inputs::InputProvenance) -> InputProvenance {
        let crate::data::inputs::InputProvenance {
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

impl From<crate::data::target::TargetRole> for TargetRole {
    fn from(v: crate::data::target::TargetRole) -> TargetRole {
        match v {
            crate::data::target::TargetRole::Target => TargetRole::Target,
            crate::data::target::TargetRole::Baseline => TargetRole::Baseline,
        }
    }
}

impl From<crate::foundation::timings::Phase> for AuditPhase {
    fn from(v: crate::foundation::timings::Phase) -> AuditPhase {
        match v {
            crate::foundation::timings::Phase::Provision => AuditPhase::Provision,
            crate::foundation::timings::Phase::Prepare => AuditPhase::Prepare,
            crate::foundation::timings::Phase::Rewrite => AuditPhase::Rewrite,
            crate::foundation::timings::Phase::WriteModels => AuditPhase::WriteModels,
            crate::foundation::timings::Phase::Sessions => AuditPhase::Sessions,
            crate::foundation::timings::Phase::ReadTensors => AuditPhase::ReadTensors,
            crate::foundation::timings::Phase::Matching => AuditPhase::Matching,
            crate::foundation::timings::Phase::Compare => AuditPhase::Compare,
            crate::foundation::timings::Phase::Persist => AuditPhase::Persist,
            crate::foundation::timings::Phase::Render => AuditPhase::Render,
            crate::foundation::timings::Phase::Other => AuditPhase::Other,
        }
    }
}
