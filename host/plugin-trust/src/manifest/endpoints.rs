//! How the host reaches a plugin's endpoints (which settings hold each one's
//! URL, trust and credentials), what it keeps out of their answers, and how a
//! create's answer books a sandbox.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::settings::{Setting, SettingKind, expect_kind};

/// One endpoint alias: every field names a setting of the plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Endpoint {
    /// The setting (kind `url`) holding its base URL. A broker's or signer's
    /// endpoint may leave it unset: `PLIMSOLL_BROKER_ENDPOINTS` maps those.
    #[serde(default)]
    pub url: Option<String>,
    /// The setting (kind `file`) holding a CA trusted for it instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// The settings (kind `file`) holding a client certificate and its key, for mutual TLS.
    #[serde(default)]
    pub client_cert: Option<String>,
    /// See `client-cert`.
    #[serde(default)]
    pub client_key: Option<String>,
    /// The setting (kind `address`) every connection goes to, whatever the host resolves to.
    #[serde(default)]
    pub connect_to: Option<String>,
    /// Headers the host attaches, each from a secret. Example:
    /// `headers = { x-api-key = { secret = "api-key" } }`.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderSecret>,
    /// A long-lived credential the host trades for a short-lived bearer.
    #[serde(default)]
    pub exchange: Option<Exchange>,
}

/// A header the host attaches from a secret setting.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HeaderSecret {
    /// The secret setting.
    pub secret: String,
    /// What goes before it (`Bearer `).
    #[serde(default)]
    pub prefix: String,
}

/// Docker Hub's kind of exchange: the host posts an identifier and a secret to a
/// URL and attaches the bearer it answers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Exchange {
    /// The setting (kind `url`) holding the exchange's URL.
    pub url: String,
    /// The setting (kind `string`) holding the account.
    pub identifier: String,
    /// The secret setting traded.
    pub secret: String,
}

fn lowercase_header(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Endpoint {
    /// Checks every setting it names, and gives the secrets it attaches.
    pub(super) fn check<'a>(
        &'a self,
        alias: &str,
        settings: &BTreeMap<String, Setting>,
        plugin_headers: &[String],
    ) -> Result<Vec<&'a str>, String> {
        let field = |f: &str| format!("endpoint {alias:?} {f}");
        let named = [
            ("url", &self.url, SettingKind::Url),
            ("ca-file", &self.ca_file, SettingKind::File),
            ("client-cert", &self.client_cert, SettingKind::File),
            ("client-key", &self.client_key, SettingKind::File),
            ("connect-to", &self.connect_to, SettingKind::Address),
        ];
        for (f, name, kind) in named {
            if let Some(n) = name {
                expect_kind(settings, &field(f), n, kind)?;
            }
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(format!("endpoint {alias:?} names a client-cert and a client-key together, or neither"));
        }
        let mut secrets = Vec::new();
        for (h, s) in &self.headers {
            if !lowercase_header(h) {
                return Err(format!("endpoint {alias:?} header {h:?} must be a lowercase header name"));
            }
            if plugin_headers.contains(h) {
                return Err(format!(
                    "endpoint {alias:?} header {h:?} is the host's to attach, so the plugin may not set it too"
                ));
            }
            expect_kind(settings, &field(&format!("header {h:?}")), &s.secret, SettingKind::Secret)?;
            secrets.push(s.secret.as_str());
        }
        if let Some(x) = &self.exchange {
            expect_kind(settings, &field("exchange url"), &x.url, SettingKind::Url)?;
            expect_kind(settings, &field("exchange identifier"), &x.identifier, SettingKind::String)?;
            expect_kind(settings, &field("exchange secret"), &x.secret, SettingKind::Secret)?;
            if self.headers.contains_key("authorization") {
                return Err(format!(
                    "endpoint {alias:?} attaches authorization from a header and an exchange; pick one"
                ));
            }
            secrets.push(x.secret.as_str());
        }
        Ok(secrets)
    }
}

/// A per-target secret a backend hands out in its answers, which the host takes
/// out before the plugin sees the answer and attaches itself to that target's
/// requests (e2b's envd access token).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HeldSecret {
    /// The endpoint whose JSON answers carry it.
    pub from: String,
    /// The top-level field holding it; taken out of every answer from `from`.
    pub field: String,
    /// The top-level field of the same answer naming its target.
    pub target_field: String,
    /// What the target field's value starts with before the target
    /// (`sandboxes/` in Docker's resource names); a value without it names none.
    #[serde(default)]
    pub target_prefix: String,
    /// The endpoint whose requests to that target carry it.
    pub to: String,
    /// The header it travels in there.
    pub header: String,
    /// What goes before it in that header (`Bearer ` for a bearer token).
    #[serde(default)]
    pub value_prefix: String,
}

impl HeldSecret {
    pub(super) fn check(&self, endpoints: &BTreeMap<String, Endpoint>) -> Result<(), String> {
        for e in [&self.from, &self.to] {
            if !endpoints.contains_key(e) {
                return Err(format!("held secret {:?} names endpoint {e:?}, which it does not declare", self.field));
            }
        }
        if self.field.is_empty() || self.target_field.is_empty() {
            return Err("a held secret names its field and its target-field".into());
        }
        if !lowercase_header(&self.header) {
            return Err(format!(
                "held secret {:?}: header {:?} must be a lowercase header name",
                self.field, self.header
            ));
        }
        Ok(())
    }
}

/// Where a create's answer names the sandbox it made, so the host counts it
/// against capacity and sweeps it if the plugin does not delete it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", rename_all_fields = "kebab-case", deny_unknown_fields)]
pub enum Booking {
    /// A JSON answer's top-level field, at an endpoint.
    Json {
        /// The endpoint.
        endpoint: String,
        /// The field.
        field: String,
    },
    /// A gRPC create method whose OK answer names what it made, and a delete
    /// method whose request names what it deleted (an OK or `NOT_FOUND` answer
    /// forgets it), at an endpoint.
    Grpc {
        /// The endpoint.
        endpoint: String,
        /// The create method's path (`/pkg.Service/CreateSandbox`).
        create: String,
        /// Field numbers from the create's answer to the target's name.
        made_at: Vec<u32>,
        /// The delete method's path.
        delete: String,
        /// Field numbers from the delete's request to the target's name.
        deleted_at: Vec<u32>,
    },
    /// A Kubernetes-style collection: a POST to it creates, the answer names the
    /// object at a JSON pointer, and a read or delete answering 404 forgets it.
    Collection {
        /// The endpoint.
        endpoint: String,
        /// The collection's path suffix (`/sandboxclaims`).
        collection: String,
        /// The JSON pointer to the object's name (`/metadata/name`).
        name_at: String,
    },
}

impl Booking {
    /// The endpoint it books at.
    pub fn endpoint(&self) -> &str {
        match self {
            Booking::Json { endpoint, .. } | Booking::Grpc { endpoint, .. } | Booking::Collection { endpoint, .. } => {
                endpoint
            }
        }
    }

    pub(super) fn check(&self, endpoints: &BTreeMap<String, Endpoint>) -> Result<(), String> {
        if !endpoints.contains_key(self.endpoint()) {
            return Err(format!("booking names endpoint {:?}, which it does not declare", self.endpoint()));
        }
        match self {
            Booking::Json { field, .. } if field.is_empty() => Err("a json booking names its field".into()),
            Booking::Grpc { create, made_at, delete, deleted_at, .. }
                if !create.starts_with('/')
                    || !delete.starts_with('/')
                    || made_at.is_empty()
                    || deleted_at.is_empty() =>
            {
                Err("a grpc booking names its create and delete paths (/pkg.Service/Method) and field numbers".into())
            }
            Booking::Collection { collection, name_at, .. }
                if !collection.starts_with('/') || !name_at.starts_with('/') =>
            {
                Err("a collection booking's collection and name-at start with /".into())
            }
            _ => Ok(()),
        }
    }
}
