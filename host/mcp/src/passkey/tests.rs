use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;

const PUBLIC: &str = "https://localhost:8443";
/// The address the owner's browser asks from, and a stranger's.
const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
const THERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

/// One real ceremony of each kind, recorded from Chromium 156's virtual
/// authenticator (CTAP2, internal, user verified) against this module's
/// settings at `https://localhost:8443`: the webauthn-rs states (serialisable
/// in test builds only) and the browser's `credential.toJSON()`. `signin` and
/// `again` are two sign-ins in that order (counter 2, then 3); `forged` was
/// made with `isBogusSignature`.
const FIXTURE: &str = r#"{
"register_state":{"rs":{"allow_synchronised_authenticators":true,"authenticator_attachment":null,"challenge":"uAScFtk5fn_tAnyUAGGuOECmtFlHOzn-kdBzyT3Hnq8","credential_algorithms":["ES256","ES384","RS256"],"exclude_credentials":[],"extensions":{"credProps":true,"credentialProtectionPolicy":"userVerificationRequired","enforceCredentialProtectionPolicy":false,"uvm":true},"policy":"required","require_resident_key":false}},
"register_credential":{"authenticatorAttachment":"platform","clientExtensionResults":{"credProps":{}},"id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","rawId":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","response":{"attestationObject":"o2NmbXRkbm9uZWdhdHRTdG10oGhhdXRoRGF0YVikSZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2NFAAAAAQECAwQFBgcIAQIDBAUGBwgAIFhBxhWAmlHfXEPZRrO66J54_XnX7Ea7aR6jFB36aITapQECAyYgASFYICsK_-7suEueqP6j6BTraP1m0vSsTGEJJAh3jEDmr5MvIlggw0nFqnBA3YhvhwB96EQrJrBvGdZibShgHXy2eiUunDQ","authenticatorData":"SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2NFAAAAAQECAwQFBgcIAQIDBAUGBwgAIFhBxhWAmlHfXEPZRrO66J54_XnX7Ea7aR6jFB36aITapQECAyYgASFYICsK_-7suEueqP6j6BTraP1m0vSsTGEJJAh3jEDmr5MvIlggw0nFqnBA3YhvhwB96EQrJrBvGdZibShgHXy2eiUunDQ","clientDataJSON":"eyJ0eXBlIjoid2ViYXV0aG4uY3JlYXRlIiwiY2hhbGxlbmdlIjoidUFTY0Z0azVmbl90QW55VUFHR3VPRUNtdEZsSE96bi1rZEJ6eVQzSG5xOCIsIm9yaWdpbiI6Imh0dHBzOi8vbG9jYWxob3N0Ojg0NDMiLCJjcm9zc09yaWdpbiI6ZmFsc2V9","publicKey":"MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKwr_7uy4S56o_qPoFOto_WbS9KxMYQkkCHeMQOavky_DScWqcEDdiG-HAH3oRCsmsG8Z1mJtKGAdfLZ6JS6cNA","publicKeyAlgorithm":-7,"transports":["internal"]},"type":"public-key"},
"signin_state":{"ast":{"allow_backup_eligible_upgrade":true,"appid":null,"challenge":"hkmvIKDw7foTCgv_ESMNsKJV3ohve9X8O6A6fq0SZag","credentials":[{"attestation":{"data":"None","metadata":"None"},"attestation_format":"none","backup_eligible":false,"backup_state":false,"counter":1,"cred":{"key":{"EC_EC2":{"curve":"SECP256R1","x":"Kwr_7uy4S56o_qPoFOto_WbS9KxMYQkkCHeMQOavky8","y":"w0nFqnBA3YhvhwB96EQrJrBvGdZibShgHXy2eiUunDQ"}},"type_":"ES256"},"cred_id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","extensions":{"appid":"NotRequested","cred_props":{"Unsigned":{"rk":null}},"cred_protect":"Ignored","hmac_create_secret":"NotRequested"},"registration_policy":"required","transports":null,"user_verified":true}],"policy":"required"}},
"signin_credential":{"authenticatorAttachment":"platform","clientExtensionResults":{},"id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","rawId":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","response":{"authenticatorData":"SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAAAg","clientDataJSON":"eyJ0eXBlIjoid2ViYXV0aG4uZ2V0IiwiY2hhbGxlbmdlIjoiaGttdklLRHc3Zm9UQ2d2X0VTTU5zS0pWM29odmU5WDhPNkE2ZnEwU1phZyIsIm9yaWdpbiI6Imh0dHBzOi8vbG9jYWxob3N0Ojg0NDMiLCJjcm9zc09yaWdpbiI6ZmFsc2V9","signature":"MEUCIQCbBxQUqEUt8Ny1vn9rB3IGunsGmoGRuM6WRWFRg_3kcwIgLdp0GNE5fAxolxzY5eCyrB58U0CXq1shSTLbxHejX5M"},"type":"public-key"},
"again_state":{"ast":{"allow_backup_eligible_upgrade":true,"appid":null,"challenge":"SHzLHRPTK6FHhf7jMuNcRdy9XJnh6nOoDFcfytsd6gQ","credentials":[{"attestation":{"data":"None","metadata":"None"},"attestation_format":"none","backup_eligible":false,"backup_state":false,"counter":1,"cred":{"key":{"EC_EC2":{"curve":"SECP256R1","x":"Kwr_7uy4S56o_qPoFOto_WbS9KxMYQkkCHeMQOavky8","y":"w0nFqnBA3YhvhwB96EQrJrBvGdZibShgHXy2eiUunDQ"}},"type_":"ES256"},"cred_id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","extensions":{"appid":"NotRequested","cred_props":{"Unsigned":{"rk":null}},"cred_protect":"Ignored","hmac_create_secret":"NotRequested"},"registration_policy":"required","transports":null,"user_verified":true}],"policy":"required"}},
"again_credential":{"authenticatorAttachment":"platform","clientExtensionResults":{},"id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","rawId":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","response":{"authenticatorData":"SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAAAw","clientDataJSON":"eyJ0eXBlIjoid2ViYXV0aG4uZ2V0IiwiY2hhbGxlbmdlIjoiU0h6TEhSUFRLNkZIaGY3ak11TmNSZHk5WEpuaDZuT29ERmNmeXRzZDZnUSIsIm9yaWdpbiI6Imh0dHBzOi8vbG9jYWxob3N0Ojg0NDMiLCJjcm9zc09yaWdpbiI6ZmFsc2V9","signature":"MEQCIG8dy9RrI2j0tP3gj8JvduOo28tSvUdgxadHtws6E4MIAiA65Ne-kPF8zEPzuXi6aWvuwWe4XU2uP86spKbFTA31cg"},"type":"public-key"},
"forged_state":{"ast":{"allow_backup_eligible_upgrade":true,"appid":null,"challenge":"eb-BHBbySfygya9wzUP4eCkLYmhD76RbRoTkh_PlUv4","credentials":[{"attestation":{"data":"None","metadata":"None"},"attestation_format":"none","backup_eligible":false,"backup_state":false,"counter":1,"cred":{"key":{"EC_EC2":{"curve":"SECP256R1","x":"Kwr_7uy4S56o_qPoFOto_WbS9KxMYQkkCHeMQOavky8","y":"w0nFqnBA3YhvhwB96EQrJrBvGdZibShgHXy2eiUunDQ"}},"type_":"ES256"},"cred_id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","extensions":{"appid":"NotRequested","cred_props":{"Unsigned":{"rk":null}},"cred_protect":"Ignored","hmac_create_secret":"NotRequested"},"registration_policy":"required","transports":null,"user_verified":true}],"policy":"required"}},
"forged_credential":{"authenticatorAttachment":"platform","clientExtensionResults":{},"id":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","rawId":"WEHGFYCaUd9cQ9lGs7ronnj9edfsRrtpHqMUHfpohNo","response":{"authenticatorData":"SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAABA","clientDataJSON":"eyJ0eXBlIjoid2ViYXV0aG4uZ2V0IiwiY2hhbGxlbmdlIjoiZWItQkhCYnlTZnlneWE5d3pVUDRlQ2tMWW1oRDc2UmJSb1RraF9QbFV2NCIsIm9yaWdpbiI6Imh0dHBzOi8vbG9jYWxob3N0Ojg0NDMiLCJjcm9zc09yaWdpbiI6ZmFsc2V9","signature":"AA"},"type":"public-key"}
}"#;

fn fixture(name: &str) -> Value {
    let all: Value = serde_json::from_str(FIXTURE).expect("fixture");
    all[name].clone()
}

/// A directory under the system's temporary one, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "plimsoll-passkey-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        Dir(p.join("state"))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if let Some(parent) = self.0.parent() {
            let _ = fs::remove_dir_all(parent);
        }
    }
}

fn open(dir: &Dir, now: Instant) -> Owner {
    Owner::open(PUBLIC, &dir.0, now).expect("opened")
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

/// Holds the recorded registration as if the setup code had started it.
fn hold_registration(o: &mut Owner, now: Instant) -> String {
    let state = serde_json::from_value(fixture("register_state")).expect("registration state");
    o.hold(Step::Register { state, by_code: true }, now)
}

/// Registers the recorded passkey: the session token.
fn registered(o: &mut Owner, now: Instant) -> String {
    let id = hold_registration(o, now);
    o.finish_registration(&id, &fixture("register_credential"), now).expect("registered")
}

/// Holds the recorded sign-in `name` as if it had been started.
fn hold_signin(o: &mut Owner, name: &str, now: Instant) -> String {
    hold_signin_counted(o, name, 1, now)
}

/// Holds the recorded sign-in `name` as if it had been started when the
/// passkey's stored counter was `counter` (the fixtures started at 1).
fn hold_signin_counted(o: &mut Owner, name: &str, counter: u32, now: Instant) -> String {
    let mut state = fixture(&format!("{name}_state"));
    state["ast"]["credentials"][0]["counter"] = json!(counter);
    let state = serde_json::from_value(state).expect("sign-in state");
    o.hold(Step::SignIn(state), now)
}

fn cookie(token: &str) -> String {
    format!("theme=dark; {COOKIE}={token}; other=1")
}

/// The stored counter of the one passkey, read back from `owner.json`.
fn stored_counter(dir: &Dir) -> u64 {
    let v: Value = serde_json::from_slice(&fs::read(dir.0.join(OWNER_FILE)).expect("owner.json")).expect("json");
    v["passkeys"][0]["cred"]["counter"].as_u64().expect("counter")
}

/// `credential` with `response.field` changed by `f` on its bytes.
fn altered(credential: &Value, field: &str, f: impl FnOnce(&mut Vec<u8>)) -> Value {
    let mut c = credential.clone();
    let mut bytes = URL_SAFE_NO_PAD.decode(c["response"][field].as_str().expect("field")).expect("base64url");
    f(&mut bytes);
    c["response"][field] = json!(URL_SAFE_NO_PAD.encode(bytes));
    c
}

// The public URL.

#[test]
fn ip_literal_public_url_is_refused_with_the_fix() {
    let dir = Dir::new();
    for (url, host) in
        [("https://127.0.0.1:8443", "127.0.0.1"), ("https://[::1]:8443", "[::1]"), ("https://127.1", "127.0.0.1")]
    {
        let e = Owner::open(url, &dir.0, Instant::now()).expect_err(url);
        assert!(matches!(&e, PasskeyError::IpHost { host: h } if h == host), "{url}: {e:?}");
        assert!(e.to_string().contains("use a name such as localhost"), "{e}");
        assert_eq!(e.status(), 500);
    }
    assert!(!dir.0.exists(), "nothing is created for a refused URL");
}

#[test]
fn public_url_must_be_https_host_and_port_only() {
    let dir = Dir::new();
    for url in [
        "http://localhost:8443",
        "https://localhost:8443/mcp",
        "https://u:p@localhost",
        "https://localhost/?q",
        "nonsense",
    ] {
        let e = Owner::open(url, &dir.0, Instant::now()).expect_err(url);
        assert!(matches!(e, PasskeyError::PublicUrl { .. }), "{url}: {e:?}");
    }
}

#[test]
fn rp_id_is_the_public_urls_host_and_origin_its_origin() {
    let dir = Dir::new();
    let o = Owner::open("https://Plimsoll.Example:8443/", &dir.0, Instant::now()).expect("opened");
    assert_eq!(o.rp_id(), "plimsoll.example");
    assert_eq!(o.origin(), "https://plimsoll.example:8443");
    let o = Owner::open("https://localhost:443", &dir.0, Instant::now()).expect("opened");
    assert_eq!((o.rp_id(), o.origin()), ("localhost", "https://localhost"));
}

// The state directory and owner.json.

#[test]
fn state_dir_is_created_0700() {
    let dir = Dir::new();
    let o = open(&dir, Instant::now());
    assert_eq!(mode(&dir.0), 0o700);
    assert_eq!(o.passkeys(), 0);
    assert!(!dir.0.join(OWNER_FILE).exists(), "nothing is written before a passkey is registered");
}

#[test]
fn state_dir_open_to_others_is_refused() {
    let dir = Dir::new();
    fs::create_dir_all(&dir.0).expect("dir");
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).expect("chmod");
    let e = Owner::open(PUBLIC, &dir.0, Instant::now()).expect_err("open directory");
    assert!(matches!(e, PasskeyError::StateDirOpen { mode: 0o755, .. }), "{e:?}");
    assert!(e.to_string().contains("chmod 700"), "{e}");
}

#[test]
fn corrupt_owner_file_is_refused_naming_it() {
    let dir = Dir::new();
    drop(open(&dir, Instant::now()));
    let file = dir.0.join(OWNER_FILE);
    fs::write(&file, b"{\"user\": \"00\", \"passkeys\": []}").expect("write");
    let e = Owner::open(PUBLIC, &dir.0, Instant::now()).expect_err("bad user handle");
    assert!(matches!(e, PasskeyError::StateFile { .. }), "{e:?}");
    assert!(e.to_string().contains(&file.display().to_string()) && e.to_string().contains("move it aside"), "{e}");
    fs::write(&file, b"{\"user\": \"00000000000000000000000000000000\", \"passkeys\": [], \"admin\": true}")
        .expect("write");
    let e = Owner::open(PUBLIC, &dir.0, Instant::now()).expect_err("unknown field");
    assert!(e.to_string().contains("unknown field"), "{e}");
}

#[test]
fn registration_persists_0600_and_reloads() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    // A temporary file left with a looser mode does not pass it on.
    fs::write(dir.0.join("owner.json.tmp"), b"old").expect("tmp");
    fs::set_permissions(dir.0.join("owner.json.tmp"), fs::Permissions::from_mode(0o644)).expect("chmod");
    registered(&mut o, now);
    let file = dir.0.join(OWNER_FILE);
    assert_eq!(mode(&file), 0o600);
    assert!(!dir.0.join("owner.json.tmp").exists());
    drop(o);

    let again = open(&dir, now);
    assert_eq!(again.passkeys(), 1);
    assert_eq!(again.setup_code(), None, "no setup code once a passkey is registered");
    assert_eq!(stored_counter(&dir), 1);
}

// The setup code.

#[test]
fn setup_code_is_three_groups_of_four_unambiguous_characters() {
    let dir = Dir::new();
    let a = open(&dir, Instant::now()).setup_code().expect("code").to_string();
    let b = open(&dir, Instant::now()).setup_code().expect("code").to_string();
    assert_ne!(a, b, "each start mints a new code");
    let groups: Vec<&str> = a.split('-').collect();
    assert_eq!(groups.iter().map(|g| g.len()).collect::<Vec<_>>(), [4, 4, 4], "{a}");
    assert!(a.bytes().filter(|b| *b != b'-').all(|b| CODE_ALPHABET.contains(&b)), "{a}");
    assert!(!a.contains(['0', '1', 'O', 'I']), "{a}");
    // 12 characters of 5 bits each.
    assert_eq!(CODE_ALPHABET.len(), 32);
}

#[test]
fn right_setup_code_starts_a_registration_that_requires_user_verification() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    // Case, dashes and spaces do not matter.
    let typed = format!(" {} ", o.setup_code().expect("code").replace('-', " ").to_lowercase());
    let (id, options) = o.start_registration(&typed, HERE, now).expect("started");
    assert_eq!(id.len(), 43, "256 bits, base64url");
    let pk = &options["publicKey"];
    assert_eq!(pk["rp"]["id"], "localhost");
    assert_eq!(pk["authenticatorSelection"]["userVerification"], "required");
    assert!(pk["challenge"].as_str().is_some_and(|c| c.len() >= 43), "{pk}");
    assert!(pk.get("excludeCredentials").is_none_or(|v| v.as_array().is_some_and(Vec::is_empty)), "{pk}");
    assert_eq!(o.setup_code().map(str::len), Some(14), "the code lasts until a passkey is registered");
}

#[test]
fn wrong_setup_codes_are_limited_per_address_and_never_burn_the_code() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    let code = o.setup_code().expect("code").to_string();
    let held = hold_registration(&mut o, t0);
    // A stranger's wrong codes: refused by name, then limited before they are checked.
    for _ in 0..FAILED_TRIES {
        let e = o.start_registration("WRNG-CODE-2345", THERE, t0).expect_err("wrong");
        assert!(matches!(e, PasskeyError::WrongSetupCode), "{e:?}");
        assert_eq!(e.status(), 403);
        assert_eq!(e.to_string(), "wrong setup code; copy the code printed on the console where plimsoll started");
    }
    let e = o.start_registration(&code, THERE, t0).expect_err("limited, even the right code");
    assert!(matches!(e, PasskeyError::RateLimited { retry_after } if retry_after == RATE_WINDOW), "{e:?}");
    assert!(!e.to_string().contains(&code), "no message shows the code");
    // None of that touched the owner: the code, and the registration it started, stand.
    assert_eq!(o.setup_code(), Some(code.as_str()));
    o.start_registration(&code, HERE, t0).expect("the owner's address is not limited");
    o.finish_registration(&held, &fixture("register_credential"), t0).expect("the held registration finishes");
    // The stranger's window slides, and the code is spent now.
    let e = o.start_registration(&code, THERE, t0 + RATE_WINDOW).expect_err("registered");
    assert!(matches!(e, PasskeyError::AlreadyRegistered), "{e:?}");
}

#[test]
fn setup_code_is_refused_once_a_passkey_is_registered() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let code = o.setup_code().expect("code").to_string();
    registered(&mut o, now);
    let e = o.start_registration(&code, HERE, now).expect_err("registered");
    assert!(matches!(e, PasskeyError::AlreadyRegistered), "{e:?}");
    assert_eq!(e.status(), 409);
}

// Registration.

#[test]
fn registration_with_the_recorded_browser_response_signs_in() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let token = registered(&mut o, now);
    assert_eq!(o.passkeys(), 1);
    assert_eq!(o.setup_code(), None, "the setup code is spent");
    assert_eq!(o.session(Some(&cookie(&token)), now), Ok(()));
}

#[test]
fn registration_ceremony_counts_once() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let id = hold_registration(&mut o, now);
    o.finish_registration(&id, &fixture("register_credential"), now).expect("registered");
    let e = o.finish_registration(&id, &fixture("register_credential"), now).expect_err("replay");
    assert!(matches!(e, PasskeyError::CeremonyUsed), "{e:?}");
    assert_eq!(e.status(), 401);
    assert_eq!(o.passkeys(), 1);
}

#[test]
fn second_setup_code_registration_is_refused_after_the_first() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let code = o.setup_code().expect("code").to_string();
    let (other, _) = o.start_registration(&code, HERE, now).expect("started");
    registered(&mut o, now);
    let e = o.finish_registration(&other, &fixture("register_credential"), now).expect_err("second");
    assert!(matches!(e, PasskeyError::UnknownCeremony), "{e:?}");
    assert_eq!(o.passkeys(), 1);
}

#[test]
fn malformed_credential_is_bad_input_and_uses_the_ceremony() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let code = o.setup_code().expect("code").to_string();
    let (id, _) = o.start_registration(&code, HERE, now).expect("started");
    let e = o.finish_registration(&id, &json!({"id": "x"}), now).expect_err("malformed");
    assert!(matches!(e, PasskeyError::BadCredential { .. }), "{e:?}");
    assert_eq!(e.status(), 400);
    let e = o.finish_registration(&id, &fixture("register_credential"), now).expect_err("used");
    assert!(matches!(e, PasskeyError::CeremonyUsed), "{e:?}");
}

#[test]
fn registration_response_to_another_challenge_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let code = o.setup_code().expect("code").to_string();
    let (id, _) = o.start_registration(&code, HERE, now).expect("started");
    let e = o.finish_registration(&id, &fixture("register_credential"), now).expect_err("other challenge");
    assert!(matches!(e, PasskeyError::ChallengeMismatch), "{e:?}");
    assert_eq!(o.passkeys(), 0);
    assert!(o.setup_code().is_some(), "a failed registration does not spend the code");
}

#[test]
fn signed_in_owner_may_start_another_registration_excluding_the_first() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let e = o.start_registration_signed_in(None, now).expect_err("no session");
    assert!(matches!(e, PasskeyError::NotSignedIn(SessionRefusal::Missing)), "{e:?}");
    assert_eq!(e.status(), 401);
    let token = registered(&mut o, now);
    let (_, options) = o.start_registration_signed_in(Some(&cookie(&token)), now).expect("started");
    let excluded = &options["publicKey"]["excludeCredentials"];
    assert_eq!(excluded[0]["id"], fixture("register_credential")["rawId"], "{excluded}");
}

// Ceremonies.

#[test]
fn unknown_ceremony_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let e = o.finish_signin("no-such-ceremony", &fixture("signin_credential"), HERE, now).expect_err("unknown");
    assert!(matches!(e, PasskeyError::UnknownCeremony), "{e:?}");
    assert_eq!(e.status(), 400);
    let e = o.finish_registration("no-such-ceremony", &fixture("register_credential"), now).expect_err("unknown");
    assert!(matches!(e, PasskeyError::UnknownCeremony), "{e:?}");
}

#[test]
fn ceremony_of_the_other_kind_is_unknown_and_kept() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let id = hold_signin(&mut o, "signin", now);
    let e = o.finish_registration(&id, &fixture("register_credential"), now).expect_err("kind");
    assert!(matches!(e, PasskeyError::UnknownCeremony), "{e:?}");
    o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect("the sign-in is still held");
}

#[test]
fn ceremony_expires_after_five_minutes() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    registered(&mut o, t0);
    let late = hold_signin(&mut o, "signin", t0);
    let swept = hold_signin(&mut o, "signin", t0);
    let at = t0 + CEREMONY_LIFE;
    let e = o.finish_signin(&late, &fixture("signin_credential"), HERE, at).expect_err("expired");
    assert!(matches!(e, PasskeyError::CeremonyExpired), "{e:?}");
    assert_eq!(e.status(), 400);
    // Still told apart from an unknown one after a sweep has moved it.
    o.start_signin(HERE, at).expect("started");
    let e = o.finish_signin(&swept, &fixture("signin_credential"), HERE, at).expect_err("expired");
    assert!(matches!(e, PasskeyError::CeremonyExpired), "{e:?}");
    // One second earlier it would have counted.
    let in_time = hold_signin(&mut o, "signin", at);
    o.finish_signin(&in_time, &fixture("signin_credential"), HERE, at + CEREMONY_LIFE - Duration::from_secs(1))
        .expect("in time");
}

#[test]
fn ceremonies_held_are_bounded_oldest_first() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    let code = o.setup_code().expect("code").to_string();
    let (first, _) = o.start_registration(&code, HERE, t0).expect("first");
    for i in 1..=MAX_CEREMONIES as u64 {
        o.start_registration(&code, HERE, t0 + Duration::from_millis(i)).expect("started");
    }
    assert_eq!(o.ceremonies.len(), MAX_CEREMONIES);
    let e = o.finish_registration(&first, &fixture("register_credential"), t0).expect_err("dropped");
    assert!(matches!(e, PasskeyError::UnknownCeremony), "{e:?}");
}

// Sign-in.

#[test]
fn sign_in_with_no_passkey_is_refused() {
    let dir = Dir::new();
    let mut o = open(&dir, Instant::now());
    let e = o.start_signin(HERE, Instant::now()).expect_err("no passkey");
    assert!(matches!(e, PasskeyError::NoPasskey), "{e:?}");
    assert_eq!(e.status(), 409);
}

#[test]
fn sign_in_options_require_user_verification_and_name_the_passkey() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let (id, options) = o.start_signin(HERE, now).expect("started");
    assert_eq!(id.len(), 43);
    let pk = &options["publicKey"];
    assert_eq!(pk["userVerification"], "required");
    assert_eq!(pk["rpId"], "localhost");
    assert_eq!(pk["allowCredentials"][0]["id"], fixture("register_credential")["rawId"]);
}

#[test]
fn sign_in_with_the_recorded_assertion_persists_the_counter() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let id = hold_signin(&mut o, "signin", now);
    let token = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect("signed in");
    assert_eq!(o.session(Some(&cookie(&token)), now), Ok(()));
    assert_eq!(stored_counter(&dir), 2);
    let id = hold_signin_counted(&mut o, "again", 2, now);
    o.finish_signin(&id, &fixture("again_credential"), HERE, now).expect("signed in again");
    assert_eq!(stored_counter(&dir), 3);
}

#[test]
fn replayed_assertion_to_its_own_ceremony_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let id = hold_signin(&mut o, "signin", now);
    o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect("signed in");
    let e = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect_err("replay");
    assert!(matches!(e, PasskeyError::CeremonyUsed), "{e:?}");
    assert_eq!(e.status(), 401);
    assert_eq!(e.to_string(), "this passkey ceremony was already used and a response counts only once; start again");
}

#[test]
fn replayed_assertion_to_a_new_ceremony_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let (id, _) = o.start_signin(HERE, now).expect("started");
    let e = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect_err("replay");
    assert!(matches!(e, PasskeyError::ChallengeMismatch), "{e:?}");
    assert_eq!(e.status(), 401);
    assert_eq!(
        e.to_string(),
        "this passkey response answers another ceremony's challenge, so it is a replay; start again"
    );
}

#[test]
fn forged_assertion_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    // Chromium's bogus signature, and a valid one with one bit of its r flipped.
    let flipped = altered(&fixture("signin_credential"), "signature", |sig| sig[8] ^= 1);
    for (name, credential) in [("forged", fixture("forged_credential")), ("signin", flipped)] {
        let id = hold_signin(&mut o, name, now);
        let e = o.finish_signin(&id, &credential, HERE, now).expect_err("forged");
        assert!(matches!(e, PasskeyError::BadSignature), "{name}: {e:?}");
        assert_eq!(e.status(), 401);
        assert_eq!(
            e.to_string(),
            "the passkey signature does not verify; this response was not made by the registered passkey"
        );
    }
    assert_eq!(stored_counter(&dir), 1, "a forgery moves no counter");
}

#[test]
fn counter_that_does_not_increase_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let id = hold_signin(&mut o, "again", now);
    o.finish_signin(&id, &fixture("again_credential"), HERE, now).expect("counter 3");
    let id = hold_signin_counted(&mut o, "signin", 3, now);
    let e = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect_err("counter 2 after 3");
    assert!(matches!(e, PasskeyError::CounterNotIncreased), "{e:?}");
    assert_eq!(e.status(), 401);
    assert_eq!(stored_counter(&dir), 3);
    // The same counter again is refused too.
    let id = hold_signin_counted(&mut o, "again", 3, now);
    let e = o.finish_signin(&id, &fixture("again_credential"), HERE, now).expect_err("counter 3 after 3");
    assert!(matches!(e, PasskeyError::CounterNotIncreased), "{e:?}");
}

#[test]
fn sign_in_started_before_another_finished_is_superseded() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    // Both started at counter 1; the later assertion (3) finishes first, so
    // the earlier one (2) must not pass on its stale view of the counter.
    let first = hold_signin(&mut o, "signin", now);
    let second = hold_signin(&mut o, "again", now);
    o.finish_signin(&second, &fixture("again_credential"), HERE, now).expect("counter 3");
    let e = o.finish_signin(&first, &fixture("signin_credential"), HERE, now).expect_err("stale");
    assert!(matches!(e, PasskeyError::CeremonySuperseded), "{e:?}");
    assert_eq!(e.status(), 400);
    assert_eq!(stored_counter(&dir), 3);
}

#[test]
fn assertion_without_user_verification_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    // The flags byte follows the 32-byte RP ID hash; UV is bit 2.
    let credential = altered(&fixture("signin_credential"), "authenticatorData", |data| data[32] &= !0x04);
    let id = hold_signin(&mut o, "signin", now);
    let e = o.finish_signin(&id, &credential, HERE, now).expect_err("no UV");
    assert!(matches!(e, PasskeyError::NotVerified), "{e:?}");
    assert_eq!(e.status(), 401);
}

#[test]
fn assertion_for_another_origin_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    drop(o);
    // The same RP ID on another port: the browser's origin is not ours.
    let mut o = Owner::open("https://localhost:9443", &dir.0, now).expect("opened");
    let id = hold_signin(&mut o, "signin", now);
    let e = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect_err("origin");
    assert!(matches!(e, PasskeyError::WrongOrigin { .. }), "{e:?}");
    assert!(e.to_string().contains("open plimsoll at https://localhost:9443"), "{e}");
}

#[test]
fn assertion_from_an_unregistered_passkey_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    let mut credential = fixture("signin_credential");
    credential["rawId"] = json!(URL_SAFE_NO_PAD.encode([9u8; 32]));
    let id = hold_signin(&mut o, "signin", now);
    let e = o.finish_signin(&id, &credential, HERE, now).expect_err("unknown passkey");
    assert!(matches!(e, PasskeyError::UnknownPasskey), "{e:?}");
}

// Rate limits.

#[test]
fn sign_in_starts_are_rate_limited_with_a_retry_time() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    registered(&mut o, t0);
    for i in 0..SIGNIN_STARTS as u64 {
        o.start_signin(HERE, t0 + Duration::from_secs(i)).expect("within the limit");
    }
    let at = t0 + Duration::from_secs(20);
    let e = o.start_signin(HERE, at).expect_err("limited");
    o.start_signin(THERE, at).expect("another address is not");
    assert!(matches!(e, PasskeyError::RateLimited { retry_after } if retry_after == Duration::from_secs(40)), "{e:?}");
    assert_eq!(e.status(), 429);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(40)));
    assert_eq!(e.to_string(), "too many sign-in attempts from this address; try again in 40 seconds");
    // The window slides: the first start leaves it a minute after it was made.
    o.start_signin(HERE, t0 + RATE_WINDOW).expect("one slot free");
    o.start_signin(HERE, t0 + RATE_WINDOW).expect_err("only one");
}

#[test]
fn failed_sign_ins_are_rate_limited_per_address_before_they_are_checked() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    registered(&mut o, t0);
    // Junk naming no live ceremony costs nothing to refuse and counts for nothing.
    for _ in 0..2 * FAILED_TRIES {
        o.finish_signin("unknown", &json!({}), THERE, t0).expect_err("no ceremony");
    }
    for _ in 0..FAILED_TRIES {
        let forged = hold_signin(&mut o, "forged", t0);
        let e = o.finish_signin(&forged, &fixture("forged_credential"), THERE, t0).expect_err("forged");
        assert!(matches!(e, PasskeyError::BadSignature), "{e:?}");
    }
    let id = hold_signin(&mut o, "signin", t0);
    let e = o.finish_signin(&id, &fixture("signin_credential"), THERE, t0).expect_err("limited");
    assert!(matches!(e, PasskeyError::RateLimited { retry_after } if retry_after == RATE_WINDOW), "{e:?}");
    let e = o.finish_signin(&id, &fixture("signin_credential"), THERE, t0 + RATE_WINDOW - Duration::from_secs(1));
    assert!(matches!(e, Err(PasskeyError::RateLimited { .. })), "still limited: {e:?}");
    // The refused finishes did not use the ceremony, and the stranger's
    // failures do not hold up the owner's address.
    o.finish_signin(&id, &fixture("signin_credential"), HERE, t0 + RATE_WINDOW - Duration::from_secs(1))
        .expect("another address signs in");
}

#[test]
fn session_cookie_is_exactly_host_only_secure_strict_and_fifteen_minutes() {
    assert_eq!(
        Owner::set_cookie("TOKEN"),
        "__Host-plimsoll-session=TOKEN; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=900"
    );
    assert_eq!(Owner::clear_cookie(), "__Host-plimsoll-session=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0");
}

#[test]
fn missing_session_cookie_is_refused() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    registered(&mut o, now);
    assert_eq!(o.session(None, now), Err(SessionRefusal::Missing));
    assert_eq!(o.session(Some("theme=dark; plimsoll-session=x"), now), Err(SessionRefusal::Missing));
}

#[test]
fn tampered_session_cookie_is_unknown() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let token = registered(&mut o, now);
    let mut bytes = token.clone().into_bytes();
    bytes[0] = if bytes[0] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).expect("ascii");
    assert_eq!(o.session(Some(&cookie(&tampered)), now), Err(SessionRefusal::Unknown));
    assert_eq!(o.session(Some(&format!("{COOKIE}=")), now), Err(SessionRefusal::Unknown));
    assert_eq!(o.csrf(Some(&cookie(&tampered))), None);
}

#[test]
fn session_expires_after_fifteen_minutes() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    let token = registered(&mut o, t0);
    let c = cookie(&token);
    assert_eq!(o.session(Some(&c), t0 + SESSION_LIFE - Duration::from_secs(1)), Ok(()));
    assert_eq!(o.session(Some(&c), t0 + SESSION_LIFE), Err(SessionRefusal::Expired));
    assert_eq!(
        o.start_registration_signed_in(Some(&c), t0 + SESSION_LIFE).map(|_| ()).map_err(|e| e.status()),
        Err(401)
    );
    // Long after, it is forgotten.
    assert_eq!(o.session(Some(&c), t0 + 2 * SESSION_LIFE), Err(SessionRefusal::Unknown));
}

#[test]
fn sign_out_ends_only_that_session() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let first = registered(&mut o, now);
    let id = hold_signin(&mut o, "signin", now);
    let second = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect("signed in");
    assert!(o.sign_out(Some(&cookie(&first))));
    assert_eq!(o.session(Some(&cookie(&first)), now), Err(SessionRefusal::Unknown));
    assert_eq!(o.session(Some(&cookie(&second)), now), Ok(()));
    assert!(!o.sign_out(Some(&cookie(&first))), "already signed out");
    o.sign_out_all();
    assert_eq!(o.session(Some(&cookie(&second)), now), Err(SessionRefusal::Unknown));
}

#[test]
fn session_tokens_are_kept_only_as_their_sha256() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    let token = registered(&mut o, now);
    assert_eq!(URL_SAFE_NO_PAD.decode(&token).expect("base64url").len(), 32, "256 bits");
    let key: Digest = Sha256::digest(token.as_bytes()).into();
    assert_eq!(o.sessions.keys().copied().collect::<Vec<_>>(), [key]);
    assert!(!format!("{o:?}").contains(&token));
    assert!(!fs::read_to_string(dir.0.join(OWNER_FILE)).expect("owner.json").contains(&token));
}

#[test]
fn sessions_held_are_bounded() {
    let dir = Dir::new();
    let t0 = Instant::now();
    let mut o = open(&dir, t0);
    let first = registered(&mut o, t0);
    for i in 1..=MAX_SESSIONS as u64 {
        o.mint_session(t0 + Duration::from_secs(i));
    }
    assert_eq!(o.sessions.len(), MAX_SESSIONS);
    assert_eq!(o.session(Some(&cookie(&first)), t0), Err(SessionRefusal::Unknown), "the oldest went first");
}

#[test]
fn csrf_value_is_per_session_and_checked() {
    let dir = Dir::new();
    let now = Instant::now();
    let mut o = open(&dir, now);
    assert_eq!(o.csrf(None), None);
    let a = registered(&mut o, now);
    let id = hold_signin(&mut o, "signin", now);
    let b = o.finish_signin(&id, &fixture("signin_credential"), HERE, now).expect("signed in");
    let (ca, cb) = (o.csrf(Some(&cookie(&a))).expect("a"), o.csrf(Some(&cookie(&b))).expect("b"));
    assert_eq!(ca.len(), 64);
    assert_ne!(ca, cb);
    assert_eq!(o.csrf(Some(&cookie(&a))).as_deref(), Some(ca.as_str()), "fixed for the session");
    assert!(!ca.contains(&a) && ca != hex::encode(Sha256::digest(a.as_bytes())), "not the session's own digest");
    assert!(o.check_csrf(Some(&cookie(&a)), &ca));
    assert!(!o.check_csrf(Some(&cookie(&a)), &cb), "another session's value");
    assert!(!o.check_csrf(Some(&cookie(&a)), ""));
    assert!(!o.check_csrf(None, &ca), "no cookie");
    o.sign_out(Some(&cookie(&a)));
    assert!(!o.check_csrf(Some(&cookie(&a)), &ca), "signed out");
}

// Errors.

#[test]
fn every_refusal_has_its_status() {
    let cases = [
        (PasskeyError::WrongSetupCode, 403),
        (PasskeyError::AlreadyRegistered, 409),
        (PasskeyError::NoPasskey, 409),
        (PasskeyError::TooManyPasskeys, 409),
        (PasskeyError::NotSignedIn(SessionRefusal::Expired), 401),
        (PasskeyError::UnknownCeremony, 400),
        (PasskeyError::CeremonyExpired, 400),
        (PasskeyError::CeremonySuperseded, 400),
        (PasskeyError::BadCredential { reason: String::new() }, 400),
        (PasskeyError::CeremonyUsed, 401),
        (PasskeyError::ChallengeMismatch, 401),
        (PasskeyError::BadSignature, 401),
        (PasskeyError::CounterNotIncreased, 401),
        (PasskeyError::NotVerified, 401),
        (PasskeyError::WrongOrigin { origin: PUBLIC.to_string() }, 401),
        (PasskeyError::UnknownPasskey, 401),
        (PasskeyError::Rejected { reason: String::new() }, 401),
        (PasskeyError::RateLimited { retry_after: Duration::from_millis(10) }, 429),
    ];
    for (e, status) in cases {
        assert_eq!(e.status(), status, "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with(char::is_lowercase) && !text.ends_with('.'), "{text}");
    }
    assert_eq!(
        PasskeyError::RateLimited { retry_after: Duration::from_millis(10) }.to_string(),
        "too many sign-in attempts from this address; try again in 1 seconds"
    );
}
