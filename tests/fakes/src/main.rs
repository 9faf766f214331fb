//! `plimsoll-fake`: fake vendor backends for the remote provider plugins, written
//! from the vendors' published APIs and backed by local docker containers so code
//! really runs. Each serves HTTPS on one address with a CA it generates, prints
//! every setting a daemon needs as `KEY=VALUE` lines once it is ready, and can
//! misbehave in the ways the plugins must catch.
//!
//! ```text
//! plimsoll-fake <e2b|dockercloud|openshell> --listen 127.0.0.1:PORT [--misbehave MODE] [--image ID] [--route NAME=ADDR]...
//! plimsoll-fake kubernetes --listen 127.0.0.1:PORT --runtime-class HANDLER [--pool-size N] [--template FILE] [--misbehave MODE] [--image ID]
//! plimsoll-fake forward ADDR SOCKET   (inside a sandbox's container: its way out)
//! ```

mod backing;
mod dockercloud;
mod e2b;
mod egress;
mod kubernetes;
mod openshell;
mod pki;
mod server;
mod util;

use std::sync::Arc;

const USAGE: &str =
    "usage: plimsoll-fake <e2b|dockercloud|openshell> --listen 127.0.0.1:PORT [--misbehave MODE] [--image ID] [--dir DIR]
                     [--route NAME=ADDR]... [--page-size N]
       plimsoll-fake kubernetes --listen 127.0.0.1:PORT --runtime-class HANDLER [--pool-size N]
                     [--template FILE] [--misbehave MODE] [--image ID] [--dir DIR]

  --listen ADDR     where to serve HTTPS (loopback only; openshell: gRPC, mutual TLS)
  --misbehave MODE  answer wrongly in one way (modes below); default: behave
  --image ID        the docker image sandboxes run (default: images/out/sandbox.id)
  --dir DIR         where to write the generated CA, and openshell's client certificate
                    and key (default: a new temporary directory)
  --route NAME=ADDR e2b: where a sandbox whose network rules allow NAME reaches it (plain
                    HTTP to a loopback ADDR stands in for HTTPS to NAME); repeatable
  --runtime-class HANDLER
                    kubernetes (required): the RuntimeClass's handler; runsc runs pods
                    under gVisor, anything else (runc, kata, ...) under runc
  --pool-size N     kubernetes: the warm pool's replicas (default 2)
  --template FILE   kubernetes: the operator's SandboxTemplate (YAML or JSON) instead of the
                    fake's own, ${SANDBOX_IMAGE} and ${SANDBOXD_TOKEN_SHA256} filled; stored as
                    written, its pods defaulted and made canonical as the API server makes them
  --page-size N     e2b: the most sandboxes one page of the listing holds (1 to 100,
                    default E2B's 100), so a client's paging is walked

Once ready (kubernetes: the warm pool full and every pod's sandboxd answering) it
prints the daemon's settings as KEY=VALUE lines, then serves until it is sent
SIGTERM or SIGINT, and removes every container it made.";

fn fail(message: &str) -> ! {
    eprintln!("plimsoll-fake: {message}");
    std::process::exit(2);
}

/// `plimsoll-fake forward ADDR SOCKET`: run inside a sandbox's container (see
/// `egress`), it passes every connection to `ADDR` to the fake's egress on `SOCKET`.
fn forward(args: &[String]) {
    let [listen, socket] = args else { fail("usage: plimsoll-fake forward ADDR SOCKET") };
    let listen: std::net::SocketAddr =
        listen.parse().unwrap_or_else(|_| fail("forward: ADDR is an IP address and port"));
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| fail(&e.to_string()));
    if let Err(e) = rt.block_on(egress::forward(listen, socket.into())) {
        fail(&format!("forward: {e}"));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\n\ne2b modes:");
        for (mode, what) in e2b::MODES {
            println!("  {mode:<18} {what}");
        }
        println!("\ndockercloud modes:");
        for (mode, what) in dockercloud::MODES {
            println!("  {mode:<18} {what}");
        }
        println!("\nopenshell modes:");
        for (mode, what) in openshell::MODES {
            println!("  {mode:<18} {what}");
        }
        println!("\nkubernetes modes:");
        for (mode, what) in kubernetes::MODES {
            println!("  {mode:<18} {what}");
        }
        return;
    }
    if args[0] == "forward" {
        forward(&args[1..]);
        return;
    }
    let vendor = args[0].clone();
    let mut routes = egress::Routes::default();
    let mut listen = None;
    let mut mode = None;
    let mut image = None;
    let mut dir = None;
    let mut runtime_class = None;
    let mut pool_size = None;
    let mut page_size = None;
    let mut template = None;
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().cloned().unwrap_or_else(|| fail(&format!("{flag} needs a value\n{USAGE}")));
        match flag.as_str() {
            "--listen" => listen = Some(value),
            "--misbehave" => mode = Some(value),
            "--image" => image = Some(value),
            "--dir" => dir = Some(std::path::PathBuf::from(value)),
            "--route" => routes.add(&value).unwrap_or_else(|e| fail(&e)),
            "--runtime-class" => runtime_class = Some(value),
            "--template" => {
                let text =
                    std::fs::read_to_string(&value).unwrap_or_else(|e| fail(&format!("--template {value}: {e}")));
                template = Some(text);
            }
            "--pool-size" => {
                pool_size = Some(value.parse::<u32>().unwrap_or_else(|_| fail("--pool-size must be a whole number")))
            }
            "--page-size" => {
                let n = value.parse::<usize>().ok().filter(|n| (1..=e2b::MAX_PAGE).contains(n));
                page_size = Some(n.unwrap_or_else(|| fail("--page-size must be a whole number from 1 to 100")));
            }
            other => fail(&format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if vendor == "kubernetes" {
        match &runtime_class {
            None => fail("kubernetes needs --runtime-class HANDLER (runsc, runc, kata, ...)"),
            Some(h) if !kubernetes::valid_handler(h) => {
                fail("--runtime-class must be a DNS label (runsc, runc, kata, ...)")
            }
            Some(_) => {}
        }
    } else if runtime_class.is_some() || pool_size.is_some() || template.is_some() {
        fail("--runtime-class, --pool-size and --template are for the kubernetes fake only");
    }
    if page_size.is_some() && vendor != "e2b" {
        fail("--page-size is for the e2b fake only");
    }
    let listen: std::net::SocketAddr = listen
        .unwrap_or_else(|| fail("--listen is required"))
        .parse()
        .unwrap_or_else(|_| fail("--listen must be an IP address and port"));
    if !listen.ip().is_loopback() {
        fail("--listen must be a loopback address: a fake serves only this machine");
    }
    let image = image.or_else(backing::default_image).unwrap_or_else(|| {
        fail("no sandbox image: pass --image ID, or build one with images/build.sh (it writes images/out/sandbox.id)")
    });
    let dir =
        dir.unwrap_or_else(|| std::env::temp_dir().join(format!("plimsoll-fake-{}-{}", vendor, std::process::id())));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail(&e.to_string()));
    let code = rt.block_on(async move {
        let names: &[&str] = match vendor.as_str() {
            "dockercloud" => &["hub.dockercloud.test", "api.dockercloud.test", "*.sandboxes.dockercloud.test"],
            "openshell" => &[openshell::HOST],
            "kubernetes" => &[kubernetes::HOST],
            _ => &["api.e2b.test", "*.e2b.test"],
        };
        let pki = Arc::new(pki::Pki::generate(&dir, names).unwrap_or_else(|e| fail(&e)));
        let backing = Arc::new(backing::Backing::new(image));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .unwrap_or_else(|e| fail(&e.to_string()));
        let handler: Arc<dyn server::Handler> = match vendor.as_str() {
            "e2b" => {
                let mode = mode.as_deref().map(|m| {
                    e2b::Mode::parse(m)
                        .unwrap_or_else(|| fail(&format!("e2b has no mode {m:?}; plimsoll-fake --help lists them")))
                });
                let egress = egress::Egress::new(Arc::clone(&pki), routes);
                let fake = e2b::Fake::new(Arc::clone(&backing), mode).with_egress(egress, dir.clone());
                Arc::new(fake.with_page_size(page_size.unwrap_or(e2b::MAX_PAGE)))
            }
            "dockercloud" => {
                let mode = mode.as_deref().map(|m| {
                    dockercloud::Mode::parse(m).unwrap_or_else(|| {
                        fail(&format!("dockercloud has no mode {m:?}; plimsoll-fake --help lists them"))
                    })
                });
                let egress = egress::Egress::new(Arc::clone(&pki), routes);
                Arc::new(dockercloud::Fake::new(Arc::clone(&backing), mode).with_egress(egress, dir.clone()))
            }
            "openshell" => {
                let mode = mode.as_deref().map(|m| {
                    openshell::Mode::parse(m).unwrap_or_else(|| {
                        fail(&format!("openshell has no mode {m:?}; plimsoll-fake --help lists them"))
                    })
                });
                Arc::new(openshell::Fake::new(Arc::clone(&backing), mode))
            }
            "kubernetes" => {
                let mode = mode.as_deref().map(|m| {
                    kubernetes::Mode::parse(m).unwrap_or_else(|| {
                        fail(&format!("kubernetes has no mode {m:?}; plimsoll-fake --help lists them"))
                    })
                });
                let options = kubernetes::Options {
                    mode,
                    handler: runtime_class.clone().unwrap_or_default(),
                    pool_size: pool_size.unwrap_or(2),
                    dir: dir.clone(),
                    template: template.clone(),
                };
                // The warm pool fills before anything is printed; a signal
                // meanwhile still removes what was made.
                let started = tokio::select! {
                    started = kubernetes::Fake::start(Arc::clone(&backing), &pki, options) => started,
                    _ = term.recv() => Err("stopped by SIGTERM while starting".into()),
                    _ = tokio::signal::ctrl_c() => Err("stopped by SIGINT while starting".into()),
                };
                match started {
                    Ok(fake) => fake,
                    Err(e) => {
                        backing.remove_all().await;
                        fail(&format!("kubernetes: {e}"));
                    }
                }
            }
            other => {
                fail(&format!("no fake for {other:?}; this build fakes e2b, dockercloud, openshell and kubernetes"))
            }
        };
        // The gateway takes only callers with a certificate from its CA.
        let tls = if vendor == "openshell" { pki.mtls_server_config() } else { pki.server_config() };
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap_or_else(|e| fail(&format!("{listen}: {e}")));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| fail(&e.to_string()));
        for (k, v) in handler.settings(port, &pki) {
            println!("{k}={v}");
        }
        println!("READY=1");
        let served = tokio::spawn(server::serve(listener, tls, Arc::clone(&handler)));
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = served => {}
        }
        backing.remove_all().await;
        0
    });
    std::process::exit(code);
}
