//! The OpenShell gateway's messages, written by hand with prost's derive from
//! NVIDIA/OpenShell's `proto/openshell.proto` (package `openshell.v1`),
//! `proto/sandbox.proto` (`openshell.sandbox.v1`) and `proto/datamodel.proto`
//! (`openshell.datamodel.v1`): the field numbers and types are theirs. Only the
//! messages the fake serves are here, but each of those whole, and the policy
//! tree whole, so a policy comes back exactly as it was sent. Maps are
//! `BTreeMap`s, so an encoding is the same every time.

use std::collections::BTreeMap;

use prost_types::Struct;

// --- openshell.datamodel.v1 ---

/// `ObjectMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectMeta {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int64, tag = "3")]
    pub created_at_ms: i64,
    #[prost(btree_map = "string, string", tag = "4")]
    pub labels: BTreeMap<String, String>,
    #[prost(uint64, tag = "5")]
    pub resource_version: u64,
    #[prost(btree_map = "string, string", tag = "6")]
    pub annotations: BTreeMap<String, String>,
    #[prost(string, tag = "7")]
    pub workspace: String,
    #[prost(int64, tag = "8")]
    pub deletion_timestamp_ms: i64,
}

// --- openshell.v1 ---

/// `ServiceStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
pub enum ServiceStatus {
    Unspecified = 0,
    Healthy = 1,
    Degraded = 2,
    Unhealthy = 3,
}

/// `HealthRequest` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthRequest {}

/// `HealthResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthResponse {
    #[prost(enumeration = "ServiceStatus", tag = "1")]
    pub status: i32,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `GetGatewayInfoRequest` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetGatewayInfoRequest {}

/// `GetGatewayInfoResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetGatewayInfoResponse {
    #[prost(enumeration = "ServiceStatus", tag = "1")]
    pub status: i32,
    #[prost(string, tag = "2")]
    pub gateway_version: String,
    #[prost(message, repeated, tag = "3")]
    pub compute_drivers: Vec<ComputeDriverInfo>,
}

/// `ComputeDriverInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ComputeDriverInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub capabilities: Option<ComputeDriverCapabilities>,
}

/// `ComputeDriverCapabilities`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ComputeDriverCapabilities {
    #[prost(string, tag = "1")]
    pub driver_name: String,
    #[prost(string, tag = "2")]
    pub driver_version: String,
}

/// `Sandbox` (4 and 5 are reserved: the old top-level phase and policy version).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sandbox {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<SandboxSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<SandboxStatus>,
}

/// `SandboxSpec` (10 and 11 are reserved).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxSpec {
    #[prost(string, tag = "1")]
    pub log_level: String,
    #[prost(btree_map = "string, string", tag = "5")]
    pub environment: BTreeMap<String, String>,
    #[prost(message, optional, tag = "6")]
    pub template: Option<SandboxTemplate>,
    #[prost(message, optional, tag = "7")]
    pub policy: Option<SandboxPolicy>,
    #[prost(string, repeated, tag = "8")]
    pub providers: Vec<String>,
    #[prost(message, optional, tag = "9")]
    pub resource_requirements: Option<ResourceRequirements>,
    #[prost(string, repeated, tag = "12")]
    pub command: Vec<String>,
    #[prost(bool, tag = "13")]
    pub tty: bool,
}

/// `ResourceRequirements`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceRequirements {
    #[prost(message, optional, tag = "1")]
    pub gpu: Option<GpuResourceRequirements>,
}

/// `GpuResourceRequirements`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GpuResourceRequirements {
    #[prost(uint32, optional, tag = "1")]
    pub count: Option<u32>,
}

/// `SandboxTemplate` (9 is reserved).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxTemplate {
    #[prost(string, tag = "1")]
    pub image: String,
    #[prost(string, tag = "2")]
    pub runtime_class_name: String,
    #[prost(string, tag = "3")]
    pub agent_socket: String,
    #[prost(btree_map = "string, string", tag = "4")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "5")]
    pub annotations: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "6")]
    pub environment: BTreeMap<String, String>,
    #[prost(message, optional, tag = "7")]
    pub resources: Option<Struct>,
    #[prost(bool, optional, tag = "10")]
    pub user_namespaces: Option<bool>,
    #[prost(message, optional, tag = "11")]
    pub driver_config: Option<Struct>,
}

/// `SandboxStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxStatus {
    #[prost(string, tag = "1")]
    pub sandbox_name: String,
    #[prost(string, tag = "2")]
    pub agent_pod: String,
    #[prost(string, tag = "3")]
    pub agent_fd: String,
    #[prost(string, tag = "4")]
    pub sandbox_fd: String,
    #[prost(message, repeated, tag = "5")]
    pub conditions: Vec<SandboxCondition>,
    #[prost(enumeration = "SandboxPhase", tag = "6")]
    pub phase: i32,
    #[prost(uint32, tag = "7")]
    pub current_policy_version: u32,
    #[prost(string, tag = "8")]
    pub main_process_instance_id: String,
    #[prost(int32, optional, tag = "9")]
    pub exit_code: Option<i32>,
}

/// `SandboxCondition`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxCondition {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub status: String,
    #[prost(string, tag = "3")]
    pub reason: String,
    #[prost(string, tag = "4")]
    pub message: String,
    #[prost(string, tag = "5")]
    pub last_transition_time: String,
}

/// `SandboxPhase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
pub enum SandboxPhase {
    Unspecified = 0,
    Provisioning = 1,
    Ready = 2,
    Error = 3,
    Deleting = 4,
    Unknown = 5,
    Stopping = 6,
    Stopped = 7,
    Starting = 8,
}

/// `CreateSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub spec: Option<SandboxSpec>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(btree_map = "string, string", tag = "3")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "4")]
    pub annotations: BTreeMap<String, String>,
    #[prost(string, tag = "5")]
    pub workspace: String,
}

/// `GetSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSandboxRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub workspace: String,
}

/// `ListSandboxesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListSandboxesRequest {
    #[prost(uint32, tag = "1")]
    pub limit: u32,
    #[prost(uint32, tag = "2")]
    pub offset: u32,
    #[prost(string, tag = "3")]
    pub label_selector: String,
    #[prost(string, tag = "4")]
    pub workspace: String,
    #[prost(bool, tag = "5")]
    pub all_workspaces: bool,
}

/// `DeleteSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteSandboxRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub workspace: String,
}

/// `SandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxResponse {
    #[prost(message, optional, tag = "1")]
    pub sandbox: Option<Sandbox>,
}

/// `ListSandboxesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListSandboxesResponse {
    #[prost(message, repeated, tag = "1")]
    pub sandboxes: Vec<Sandbox>,
}

/// `DeleteSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteSandboxResponse {
    #[prost(bool, tag = "1")]
    pub deleted: bool,
}

/// `ExecSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSandboxRequest {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
    #[prost(string, repeated, tag = "2")]
    pub command: Vec<String>,
    #[prost(string, tag = "3")]
    pub workdir: String,
    #[prost(btree_map = "string, string", tag = "4")]
    pub environment: BTreeMap<String, String>,
    #[prost(uint32, tag = "5")]
    pub timeout_seconds: u32,
    #[prost(bytes = "vec", tag = "6")]
    pub stdin: Vec<u8>,
    #[prost(bool, tag = "7")]
    pub tty: bool,
    #[prost(uint32, tag = "8")]
    pub cols: u32,
    #[prost(uint32, tag = "9")]
    pub rows: u32,
}

/// `ExecSandboxStdout`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSandboxStdout {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// `ExecSandboxStderr`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSandboxStderr {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// `ExecSandboxExit`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSandboxExit {
    #[prost(int32, tag = "1")]
    pub exit_code: i32,
}

/// `ExecSandboxEvent`: `oneof payload`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSandboxEvent {
    #[prost(oneof = "ExecPayload", tags = "1, 2, 3")]
    pub payload: Option<ExecPayload>,
}

/// `ExecSandboxEvent.payload`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ExecPayload {
    #[prost(message, tag = "1")]
    Stdout(ExecSandboxStdout),
    #[prost(message, tag = "2")]
    Stderr(ExecSandboxStderr),
    #[prost(message, tag = "3")]
    Exit(ExecSandboxExit),
}

// --- openshell.sandbox.v1 ---

/// `SandboxPolicy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxPolicy {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(message, optional, tag = "2")]
    pub filesystem: Option<FilesystemPolicy>,
    #[prost(message, optional, tag = "3")]
    pub landlock: Option<LandlockPolicy>,
    #[prost(message, optional, tag = "4")]
    pub process: Option<ProcessPolicy>,
    #[prost(btree_map = "string, message", tag = "5")]
    pub network_policies: BTreeMap<String, NetworkPolicyRule>,
    #[prost(btree_map = "string, message", tag = "6")]
    pub network_middlewares: BTreeMap<String, NetworkMiddlewareConfig>,
}

/// `FilesystemPolicy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilesystemPolicy {
    #[prost(bool, tag = "1")]
    pub include_workdir: bool,
    #[prost(string, repeated, tag = "2")]
    pub read_only: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub read_write: Vec<String>,
}

/// `LandlockPolicy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LandlockPolicy {
    #[prost(string, tag = "1")]
    pub compatibility: String,
}

/// `ProcessPolicy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessPolicy {
    #[prost(string, tag = "1")]
    pub run_as_user: String,
    #[prost(string, tag = "2")]
    pub run_as_group: String,
}

/// `NetworkPolicyRule`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkPolicyRule {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub endpoints: Vec<NetworkEndpoint>,
    #[prost(message, repeated, tag = "3")]
    pub binaries: Vec<NetworkBinary>,
}

/// `NetworkMiddlewareConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkMiddlewareConfig {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub middleware: String,
    #[prost(message, optional, tag = "3")]
    pub config: Option<Struct>,
    #[prost(string, tag = "4")]
    pub on_error: String,
    #[prost(message, optional, tag = "5")]
    pub endpoints: Option<MiddlewareEndpointSelector>,
    #[prost(int32, tag = "6")]
    pub order: i32,
}

/// `MiddlewareEndpointSelector`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MiddlewareEndpointSelector {
    #[prost(string, repeated, tag = "1")]
    pub include: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub exclude: Vec<String>,
}

/// `NetworkCredentialBinding`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkCredentialBinding {
    #[prost(string, tag = "1")]
    pub provider: String,
}

/// `NetworkEndpoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkEndpoint {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(uint32, tag = "2")]
    pub port: u32,
    #[prost(string, tag = "3")]
    pub protocol: String,
    #[prost(string, tag = "4")]
    pub tls: String,
    #[prost(string, tag = "5")]
    pub enforcement: String,
    #[prost(string, tag = "6")]
    pub access: String,
    #[prost(message, repeated, tag = "7")]
    pub rules: Vec<L7Rule>,
    #[prost(string, repeated, tag = "8")]
    pub allowed_ips: Vec<String>,
    #[prost(uint32, repeated, tag = "9")]
    pub ports: Vec<u32>,
    #[prost(message, repeated, tag = "10")]
    pub deny_rules: Vec<L7DenyRule>,
    #[prost(bool, tag = "11")]
    pub allow_encoded_slash: bool,
    #[prost(string, tag = "12")]
    pub persisted_queries: String,
    #[prost(btree_map = "string, message", tag = "13")]
    pub graphql_persisted_queries: BTreeMap<String, GraphqlOperation>,
    #[prost(uint32, tag = "14")]
    pub graphql_max_body_bytes: u32,
    #[prost(string, tag = "15")]
    pub path: String,
    #[prost(bool, tag = "16")]
    pub websocket_credential_rewrite: bool,
    #[prost(bool, tag = "17")]
    pub request_body_credential_rewrite: bool,
    #[prost(bool, tag = "18")]
    pub advisor_proposed: bool,
    #[prost(string, tag = "19")]
    pub credential_signing: String,
    #[prost(string, tag = "20")]
    pub signing_service: String,
    #[prost(string, tag = "21")]
    pub signing_region: String,
    #[prost(uint32, tag = "22")]
    pub json_rpc_max_body_bytes: u32,
    #[prost(message, optional, tag = "23")]
    pub mcp: Option<McpOptions>,
    #[prost(message, optional, tag = "24")]
    pub credential_binding: Option<NetworkCredentialBinding>,
    #[prost(bool, tag = "25")]
    pub allow_uninspected_credentials: bool,
    #[prost(bool, tag = "26")]
    pub provider_credentialed: bool,
}

/// `McpOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct McpOptions {
    #[prost(bool, optional, tag = "1")]
    pub strict_tool_names: Option<bool>,
    #[prost(bool, optional, tag = "2")]
    pub allow_all_known_mcp_methods: Option<bool>,
}

/// `GraphqlOperation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphqlOperation {
    #[prost(string, tag = "1")]
    pub operation_type: String,
    #[prost(string, tag = "2")]
    pub operation_name: String,
    #[prost(string, repeated, tag = "3")]
    pub fields: Vec<String>,
}

/// `L7DenyRule` (8 is reserved).
#[derive(Clone, PartialEq, prost::Message)]
pub struct L7DenyRule {
    #[prost(string, tag = "1")]
    pub method: String,
    #[prost(string, tag = "2")]
    pub path: String,
    #[prost(string, tag = "3")]
    pub command: String,
    #[prost(btree_map = "string, message", tag = "4")]
    pub query: BTreeMap<String, L7QueryMatcher>,
    #[prost(string, tag = "5")]
    pub operation_type: String,
    #[prost(string, tag = "6")]
    pub operation_name: String,
    #[prost(string, repeated, tag = "7")]
    pub fields: Vec<String>,
    #[prost(btree_map = "string, message", tag = "9")]
    pub params: BTreeMap<String, L7QueryMatcher>,
}

/// `L7Rule`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct L7Rule {
    #[prost(message, optional, tag = "1")]
    pub allow: Option<L7Allow>,
}

/// `L7Allow` (8 is reserved).
#[derive(Clone, PartialEq, prost::Message)]
pub struct L7Allow {
    #[prost(string, tag = "1")]
    pub method: String,
    #[prost(string, tag = "2")]
    pub path: String,
    #[prost(string, tag = "3")]
    pub command: String,
    #[prost(btree_map = "string, message", tag = "4")]
    pub query: BTreeMap<String, L7QueryMatcher>,
    #[prost(string, tag = "5")]
    pub operation_type: String,
    #[prost(string, tag = "6")]
    pub operation_name: String,
    #[prost(string, repeated, tag = "7")]
    pub fields: Vec<String>,
    #[prost(btree_map = "string, message", tag = "9")]
    pub params: BTreeMap<String, L7QueryMatcher>,
}

/// `L7QueryMatcher`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct L7QueryMatcher {
    #[prost(string, tag = "1")]
    pub glob: String,
    #[prost(string, repeated, tag = "2")]
    pub any: Vec<String>,
}

/// `NetworkBinary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkBinary {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(bool, tag = "2")]
    pub harness: bool,
}

/// `GetSandboxConfigRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSandboxConfigRequest {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
}

/// `GetGatewayConfigRequest` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetGatewayConfigRequest {}

/// `GetGatewayConfigResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetGatewayConfigResponse {
    #[prost(btree_map = "string, message", tag = "1")]
    pub settings: BTreeMap<String, SettingValue>,
    #[prost(uint64, tag = "2")]
    pub settings_revision: u64,
}

/// `SettingScope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
pub enum SettingScope {
    Unspecified = 0,
    Sandbox = 1,
    Global = 2,
}

/// `SettingValue`: `oneof value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SettingValue {
    #[prost(oneof = "Setting", tags = "1, 2, 3, 4")]
    pub value: Option<Setting>,
}

/// `SettingValue.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
#[expect(clippy::enum_variant_names, reason = "the variants are the proto's oneof fields, named as it names them")]
pub enum Setting {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    #[prost(int64, tag = "3")]
    IntValue(i64),
    #[prost(bytes = "vec", tag = "4")]
    BytesValue(Vec<u8>),
}

/// `EffectiveSetting`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EffectiveSetting {
    #[prost(message, optional, tag = "1")]
    pub value: Option<SettingValue>,
    #[prost(enumeration = "SettingScope", tag = "2")]
    pub scope: i32,
}

/// `PolicySource`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
pub enum PolicySource {
    Unspecified = 0,
    Sandbox = 1,
    Global = 2,
}

/// `GetSandboxConfigResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSandboxConfigResponse {
    #[prost(message, optional, tag = "1")]
    pub policy: Option<SandboxPolicy>,
    #[prost(uint32, tag = "2")]
    pub version: u32,
    #[prost(string, tag = "3")]
    pub policy_hash: String,
    #[prost(btree_map = "string, message", tag = "4")]
    pub settings: BTreeMap<String, EffectiveSetting>,
    #[prost(uint64, tag = "5")]
    pub config_revision: u64,
    #[prost(enumeration = "PolicySource", tag = "6")]
    pub policy_source: i32,
    #[prost(uint32, tag = "7")]
    pub global_policy_version: u32,
    #[prost(uint64, tag = "8")]
    pub provider_env_revision: u64,
    #[prost(message, repeated, tag = "9")]
    pub supervisor_middleware_services: Vec<SupervisorMiddlewareService>,
    #[prost(string, tag = "10")]
    pub workspace: String,
    #[prost(string, tag = "11")]
    pub policy_validation_failure_mode: String,
    #[prost(bool, tag = "12")]
    pub extension_authentication_enabled: bool,
}

/// `SupervisorMiddlewareService`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SupervisorMiddlewareService {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub grpc_endpoint: String,
    #[prost(uint64, tag = "3")]
    pub max_payload_bytes: u64,
    #[prost(string, tag = "4")]
    pub timeout: String,
    #[prost(bytes = "vec", tag = "5")]
    pub tls_ca_cert_pem: Vec<u8>,
    #[prost(string, tag = "6")]
    pub audience: String,
    #[prost(bool, tag = "7")]
    pub allow_insecure_transport: bool,
}

/// `CreateSshSessionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateSshSessionRequest {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
}

/// `CreateSshSessionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateSshSessionResponse {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
    #[prost(string, tag = "2")]
    pub token: String,
    #[prost(string, tag = "3")]
    pub gateway_host: String,
    #[prost(uint32, tag = "4")]
    pub gateway_port: u32,
    #[prost(string, tag = "5")]
    pub gateway_scheme: String,
    #[prost(string, tag = "7")]
    pub host_key_fingerprint: String,
    #[prost(int64, tag = "8")]
    pub expires_at_ms: i64,
}

/// `RevokeSshSessionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RevokeSshSessionRequest {
    #[prost(string, tag = "1")]
    pub token: String,
}

/// `RevokeSshSessionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RevokeSshSessionResponse {
    #[prost(bool, tag = "1")]
    pub revoked: bool,
}

/// `SshRelayTarget`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SshRelayTarget {}

/// `TcpRelayTarget`: a loopback target inside the sandbox.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TcpRelayTarget {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(uint32, tag = "2")]
    pub port: u32,
}

/// `TcpForwardInit`: the first frame of a forward stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TcpForwardInit {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
    #[prost(string, tag = "4")]
    pub service_id: String,
    #[prost(oneof = "ForwardTarget", tags = "5, 6")]
    pub target: Option<ForwardTarget>,
    #[prost(string, tag = "7")]
    pub authorization_token: String,
}

/// `TcpForwardInit.target`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ForwardTarget {
    #[prost(message, tag = "5")]
    Ssh(SshRelayTarget),
    #[prost(message, tag = "6")]
    Tcp(TcpRelayTarget),
}

/// `TcpForwardFrame`: the init, then the connection's bytes, either way.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TcpForwardFrame {
    #[prost(oneof = "ForwardPayload", tags = "1, 2")]
    pub payload: Option<ForwardPayload>,
}

/// `TcpForwardFrame.payload`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ForwardPayload {
    #[prost(message, tag = "1")]
    Init(TcpForwardInit),
    #[prost(bytes = "vec", tag = "2")]
    Data(Vec<u8>),
}
