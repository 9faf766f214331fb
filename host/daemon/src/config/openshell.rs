//! The openshell provider's settings (an NVIDIA OpenShell gateway over gRPC with
//! mutual TLS). The client certificate, its key and the CA are the host's; the
//! plugin reads the image, the sandbox's size and the instance.

use std::collections::BTreeMap;
use std::path::PathBuf;

use plimsoll_core::Tier;
use serde::Deserialize;

use super::env::Pick;
use super::plugins::{PluginSettings, PluginTable, PluginVars};
use super::remote::{self, EndpointConfig, RemoteConfig};
use super::{ConfigError, ProviderKind};

const OPENSHELL_PLUGIN: PluginVars = PluginVars {
    provider: "openshell",
    dir: "SANDBOX_OPENSHELL_PLUGIN",
    keys: "SANDBOX_OPENSHELL_PLUGIN_KEYS",
    approve: "SANDBOX_OPENSHELL_PLUGIN_APPROVE",
};

/// A sandbox's memory when the operator names none, in MiB.
pub const DEFAULT_MEMORY_MB: u32 = 256;
/// A sandbox's CPU share when the operator names none, in thousandths.
pub const DEFAULT_CPUS_MILLI: u32 = 1000;
/// A sandbox's `/tmp` (its only writable directory) when the operator names none, in MiB.
pub const DEFAULT_DISK_MB: u32 = 64;

/// The `[openshell]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct OpenShellTable {
    gateway_url: Option<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    image: Option<String>,
    connect_to: Option<String>,
    max_tier: Option<String>,
    instance: Option<String>,
}

/// Whether `v` may be a label value on the gateway (Kubernetes' rules): at most
/// 63 of letters, digits, `-`, `_` and `.`, a letter or digit at each end.
pub(super) fn label_value(v: &str) -> bool {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.len() <= 63
        && ends(v.chars().next())
        && ends(v.chars().last())
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Reads the openshell settings: required when it is the provider, refused when
/// it is not.
pub(super) fn openshell_config(
    pick: &mut Pick<'_>,
    provider: ProviderKind,
    t: OpenShellTable,
    plugin: Option<PluginTable>,
) -> Result<Option<RemoteConfig>, ConfigError> {
    let plugin = PluginSettings::read(pick, OPENSHELL_PLUGIN, plugin);
    let path = |p: Option<PathBuf>| p.map(|p| p.display().to_string());
    let gateway_url = pick.string("SANDBOX_OPENSHELL_GATEWAY_URL", t.gateway_url);
    let ca_file = pick.string("SANDBOX_OPENSHELL_CA_FILE", path(t.ca_file));
    let cert_file = pick.string("SANDBOX_OPENSHELL_CERT_FILE", path(t.cert_file));
    let key_file = pick.string("SANDBOX_OPENSHELL_KEY_FILE", path(t.key_file));
    let image = pick.string("SANDBOX_OPENSHELL_IMAGE", t.image);
    let connect_to = pick.string("SANDBOX_OPENSHELL_CONNECT_TO", t.connect_to);
    let max_tier = pick.string("SANDBOX_OPENSHELL_MAX_TIER", t.max_tier);
    let instance = pick.string("SANDBOX_OPENSHELL_INSTANCE", t.instance);
    if provider != ProviderKind::OpenShell {
        let set = [
            ("SANDBOX_OPENSHELL_PLUGIN", plugin.dir.is_some()),
            ("SANDBOX_OPENSHELL_GATEWAY_URL", gateway_url.is_some()),
            ("SANDBOX_OPENSHELL_CA_FILE", ca_file.is_some()),
            ("SANDBOX_OPENSHELL_CERT_FILE", cert_file.is_some()),
            ("SANDBOX_OPENSHELL_KEY_FILE", key_file.is_some()),
            ("SANDBOX_OPENSHELL_IMAGE", image.is_some()),
            ("SANDBOX_OPENSHELL_CONNECT_TO", connect_to.is_some()),
            ("SANDBOX_OPENSHELL_MAX_TIER", max_tier.is_some()),
            ("SANDBOX_OPENSHELL_INSTANCE", instance.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=openshell or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let need = |what: &str, why: &str| ConfigError::Value(format!("SANDBOX_PROVIDER=openshell needs {what}: {why}"));
    let gateway_url = gateway_url.filter(|u| !u.is_empty()).ok_or_else(|| {
        need(
            "SANDBOX_OPENSHELL_GATEWAY_URL",
            "the gateway's https URL (an OpenShell gateway serves https://127.0.0.1:17670 by default)",
        )
    })?;
    if !gateway_url.starts_with("https://") {
        return Err(ConfigError::Value(format!(
            "SANDBOX_OPENSHELL_GATEWAY_URL={gateway_url:?} must be https: the host proves itself to the gateway with a client certificate"
        )));
    }
    let connect_to = remote::address("SANDBOX_OPENSHELL_CONNECT_TO", connect_to)?;
    remote::url("SANDBOX_OPENSHELL_GATEWAY_URL", &gateway_url, connect_to)?;
    let file = |v: Option<String>| v.filter(|p| !p.is_empty()).map(PathBuf::from);
    let mtls = "the client certificate and key the gateway knows this host by (an OpenShell CLI bundle's \
                mtls/tls.crt and mtls/tls.key); only the host reads them";
    let cert_file = file(cert_file).ok_or_else(|| need("SANDBOX_OPENSHELL_CERT_FILE", mtls))?;
    let key_file = file(key_file).ok_or_else(|| need("SANDBOX_OPENSHELL_KEY_FILE", mtls))?;
    let image = image.filter(|i| !i.is_empty()).ok_or_else(|| {
        need("SANDBOX_OPENSHELL_IMAGE", "the image every sandbox runs, pinned as <name>@sha256:<digest>")
    })?;
    if !remote::pinned(&image) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_OPENSHELL_IMAGE={image:?} must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what runs"
        )));
    }
    let instance = remote::instance("SANDBOX_OPENSHELL_INSTANCE", instance)?.replace('@', ".");
    if !label_value(&instance) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_OPENSHELL_INSTANCE={instance:?} must be a gateway label value: at most 63 letters, digits, - _ ., \
             a letter or digit at each end"
        )));
    }
    let endpoint = EndpointConfig {
        url: gateway_url,
        ca_file: file(ca_file),
        client_cert: Some((cert_file, key_file)),
        connect_to,
        headers: Vec::new(),
        exchange: None,
    };
    Ok(Some(RemoteConfig {
        provider: "openshell",
        plugin: plugin.require()?,
        endpoints: BTreeMap::from([("gateway".to_string(), endpoint)]),
        settings: BTreeMap::from([("image".to_string(), image), ("instance".to_string(), instance)]),
        max_tier: remote::tier("SANDBOX_OPENSHELL_MAX_TIER", max_tier, Tier::Container)?,
        guard: None,
    }))
}

/// The sandbox's size from the operator's `SANDBOX_CPUS`, `SANDBOX_MEMORY_MB`,
/// `SANDBOX_DISK_MB` and `SANDBOX_PIDS` (0: unset), as the plugin's settings.
pub(super) fn size(cpus: f64, memory_mb: u32, disk_mb: u32, pids: u32) -> Result<[(String, String); 3], ConfigError> {
    if pids != 0 {
        return Err(ConfigError::Value(
            "SANDBOX_PIDS is set, but an OpenShell gateway sets its sandboxes' process limit itself \
             (its sandbox_pids_limit); unset it"
                .into(),
        ));
    }
    let cpus_milli = if cpus == 0.0 { DEFAULT_CPUS_MILLI } else { (cpus * 1000.0).round() as u32 };
    if cpus_milli == 0 {
        return Err(ConfigError::Value(format!("SANDBOX_CPUS={cpus} is under a thousandth of a CPU")));
    }
    let or = |v: u32, default: u32| if v == 0 { default } else { v };
    Ok([
        ("cpus-milli".into(), cpus_milli.to_string()),
        ("memory-mib".into(), or(memory_mb, DEFAULT_MEMORY_MB).to_string()),
        ("disk-mib".into(), or(disk_mb, DEFAULT_DISK_MB).to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_label_values() {
        assert!(label_value("plimsoll.ci-1"));
        assert!(!label_value("plimsoll@ci"));
        assert!(!label_value("-plimsoll"));
        assert!(!label_value(&"a".repeat(64)));
    }

    #[test]
    fn sizes_default_to_a_small_sandbox_and_pids_are_refused() {
        let s = size(0.0, 0, 0, 0).expect("defaults");
        assert_eq!(s.map(|(_, v)| v), ["1000".to_string(), "256".into(), "64".into()]);
        let s = size(0.5, 512, 128, 0).expect("set");
        assert_eq!(s.map(|(_, v)| v), ["500".to_string(), "512".into(), "128".into()]);
        let e = size(0.0, 0, 0, 64).expect_err("pids").to_string();
        assert!(e.starts_with("SANDBOX_PIDS is set, but an OpenShell gateway sets"), "{e}");
    }
}
