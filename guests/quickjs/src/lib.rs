//! QuickJS (QuickJS-ng, through rquickjs) as a component exporting `plimsoll:engine`.
//!
//! The guest holds no policy: the host sets every limit (memory per store, an epoch
//! deadline, output caps) and decides what a result means. This side only evaluates
//! code, forwards console output to the `console` import, and drives promise jobs and
//! timers until nothing is left to do. `lines` runs node line programs (controllers).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int};
use std::rc::Rc;

use rquickjs::context::EvalOptions;
use rquickjs::function::Opt;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Object, Persistent, Promise, Runtime, Value};

wit_bindgen::generate!({
    world: "engine",
    path: "../../wit/engine",
});

use exports::plimsoll::engine::evaluate::{Grant, Guest, GuestInterpreter, Status};
use plimsoll::engine::console::{Channel, write};
use plimsoll::engine::host_api;

/// The engine's own JavaScript: console, inspect, timers, the grant client.
const PRELUDE: &str = include_str!("prelude.js");
/// The grant client's route checks, shared with the Node client in containers.
const ROUTES: &str = include_str!("../../../runners/host-api/routes.js");

/// QuickJS's own stack limit, below the component's 1 MiB shadow stack, so deep
/// recursion raises a `RangeError` the caller can read instead of a trap.
const MAX_STACK_BYTES: usize = 512 << 10;

mod lines;
mod redeclare;

thread_local! {
    /// The context `prepare` built, taken by the next `run`. In the built component
    /// it is already here: the build snapshots the instance after `prepare`.
    static READY: RefCell<Option<Js>> = const { RefCell::new(None) };
    /// `Math.random`'s xorshift64* state, drawn from WASI randomness when a run or
    /// an interpreter starts (a snapshot would otherwise give every run one sequence).
    static RANDOM: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

/// Draws a fresh seed for `Math.random`.
fn reseed() {
    RANDOM.with(|r| r.set(wasi::random::random::get_random_u64() | 1));
}

/// The next `Math.random` value in [0, 1).
fn next_random() -> f64 {
    RANDOM.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}

struct Engine;

export!(Engine);

/// A session's in-memory work directory, shared with the `readFile` native.
type Files = Rc<RefCell<BTreeMap<String, Vec<u8>>>>;

/// Rejections nothing handled yet: (promise, reason), kept until a handler appears.
type Unhandled = Rc<RefCell<Vec<(Persistent<Value<'static>>, Persistent<Value<'static>>)>>>;

/// One runtime and context with the prelude installed.
struct Js {
    rt: Runtime,
    ctx: Context,
    helpers: Option<Persistent<Object<'static>>>,
    unhandled: Unhandled,
    /// Set when a line program exits: the console drops every later write.
    quiet: Rc<Cell<bool>>,
}

impl Js {
    /// A fresh context; `files` (a session's work directory) adds `readFile`.
    fn new(files: Option<Files>) -> Result<Js, String> {
        let rt = Runtime::new().map_err(|e| e.to_string())?;
        rt.set_max_stack_size(MAX_STACK_BYTES);
        let unhandled: Unhandled = Rc::default();
        let tracked = unhandled.clone();
        rt.set_host_promise_rejection_tracker(Some(Box::new(move |ctx, promise, reason, handled| {
            let mut list = tracked.borrow_mut();
            if handled {
                list.retain(|(p, _)| p.clone().restore(&ctx).map(|p| p != promise).unwrap_or(true));
            } else {
                list.push((Persistent::save(&ctx, promise), Persistent::save(&ctx, reason)));
            }
        })));
        let ctx = Context::full(&rt).map_err(|e| e.to_string())?;
        let quiet: Rc<Cell<bool>> = Rc::default();
        let silenced = quiet.clone();
        let helpers = ctx.with(|ctx| -> rquickjs::Result<_> {
            let native = Object::new(ctx.clone())?;
            native.set(
                "write",
                Function::new(ctx.clone(), move |channel: i32, text: rquickjs::String<'_>| {
                    if silenced.get() {
                        return;
                    }
                    let text = text.to_string().unwrap_or_default();
                    let channel = if channel == 1 { Channel::Stderr } else { Channel::Stdout };
                    write(channel, text.as_bytes());
                })?,
            )?;
            native.set("call", Function::new(ctx.clone(), host_call)?)?;
            let routes: Object = ctx.eval_with_options(ROUTES, options("<plimsoll routes>", false))?;
            native.set("routes", routes)?;
            let math: Object = ctx.globals().get("Math")?;
            math.set("random", Function::new(ctx.clone(), next_random)?.with_name("random")?)?;
            if let Some(files) = files {
                native.set(
                    "readFile",
                    Function::new(ctx.clone(), move |path: String| -> Option<String> {
                        files.borrow().get(&path).map(|b| String::from_utf8_lossy(b).into_owned())
                    })?,
                )?;
            }
            let setup: Function = ctx.eval_with_options(PRELUDE, options("<plimsoll prelude>", false))?;
            let helpers: Object = setup.call((native,))?;
            Ok(Persistent::save(&ctx, helpers))
        });
        let helpers = helpers.map_err(|e| format!("the engine could not install its prelude: {e}"))?;
        Ok(Js { rt, ctx, helpers: Some(helpers), unhandled, quiet })
    }

    fn helper<'js>(&self, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Function<'js>> {
        let helpers = self.helpers.clone().ok_or(rquickjs::Error::Unknown)?.restore(ctx)?;
        helpers.get(name)
    }

    /// Installs a grant's client (and its preamble); false, with the error on
    /// stderr, when that threw.
    fn install_host(&self, ctx: &Ctx<'_>, grant: Grant) -> bool {
        let installed = self
            .helper(ctx, "installHost")
            .and_then(|install| install.call::<_, ()>((grant.global, grant.routes, grant.preamble)))
            .catch(ctx);
        match installed {
            Ok(()) => true,
            Err(err) => {
                self.report(ctx, err, false);
                false
            }
        }
    }

    /// Writes an uncaught error to stderr, as Node would before exiting 1.
    fn report<'js>(&self, ctx: &Ctx<'js>, err: CaughtError<'js>, in_promise: bool) {
        let thrown = match err {
            CaughtError::Exception(e) => e.into_value(),
            CaughtError::Value(v) => v,
            CaughtError::Error(e) => {
                write(Channel::Stderr, format!("Uncaught {e}\n").as_bytes());
                return;
            }
        };
        let text = self
            .helper(ctx, "describe")
            .and_then(|describe| describe.call::<_, String>((thrown, in_promise)))
            .unwrap_or_else(|_| String::from("Uncaught exception (it could not be described)\n"));
        write(Channel::Stderr, text.as_bytes());
    }

    /// Runs promise jobs and virtual-time timers until none is left, or something
    /// throws that nothing catches.
    fn settle(&self) -> Status {
        loop {
            loop {
                match self.rt.execute_pending_job() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(job) => {
                        job.0.with(|ctx| {
                            let thrown = ctx.catch();
                            self.report(&ctx, CaughtError::Value(thrown), false);
                        });
                        return Status::Raised;
                    }
                }
            }
            if self.report_unhandled() {
                return Status::Raised;
            }
            let fired = self.ctx.with(|ctx| {
                self.helper(&ctx, "nextTimer")
                    .and_then(|next| next.call::<_, bool>(()))
                    .catch(&ctx)
                    .map_err(|err| self.report(&ctx, err, false))
            });
            match fired {
                Ok(true) => {}
                Ok(false) => return Status::Completed,
                Err(()) => return Status::Raised,
            }
        }
    }

    /// Reports the first rejection nothing handled, if any, and forgets the rest.
    fn report_unhandled(&self) -> bool {
        if self.unhandled.borrow().is_empty() {
            return false;
        }
        self.ctx.with(|ctx| {
            let first = self.unhandled.borrow_mut().drain(..).next();
            if let Some((_, reason)) = first
                && let Ok(reason) = reason.restore(&ctx)
            {
                self.report(&ctx, CaughtError::Value(reason), true);
            }
        });
        true
    }
}

impl Drop for Js {
    fn drop(&mut self) {
        // Every value kept outside the context must go before the runtime does.
        self.unhandled.borrow_mut().clear();
        self.helpers = None;
    }
}

fn options(filename: &str, promise: bool) -> EvalOptions {
    let mut opts = EvalOptions::default();
    opts.global = true;
    opts.strict = false;
    opts.promise = promise;
    opts.filename = Some(filename.to_string());
    opts
}

/// The native side of a grant's client: one brokered call through the host.
fn host_call<'js>(ctx: Ctx<'js>, method: String, path: String, body: Opt<String>) -> rquickjs::Result<Object<'js>> {
    let answer = host_api::call(&method, &path, body.0.as_ref().map(|b| b.as_bytes()));
    let out = Object::new(ctx)?;
    out.set("status", answer.status)?;
    out.set("contentType", answer.content_type)?;
    out.set("body", String::from_utf8_lossy(&answer.body).into_owned())?;
    Ok(out)
}

fn fatal(message: &str) -> Status {
    write(Channel::Stderr, format!("{message}\n").as_bytes());
    Status::Raised
}

impl Guest for Engine {
    type Interpreter = Interpreter;

    fn prepare() {
        // First, so the context below reuses the memory the compiler freed.
        lines::prepare();
        if let Ok(js) = Js::new(None) {
            READY.with(|r| *r.borrow_mut() = Some(js));
        }
    }

    fn run(code: String, grant: Option<Grant>) -> Status {
        reseed();
        let js = match READY.with(|r| r.borrow_mut().take()).map_or_else(|| Js::new(None), Ok) {
            Ok(js) => js,
            Err(e) => return fatal(&e),
        };
        let ran = js.ctx.with(|ctx| {
            if let Some(grant) = grant
                && !js.install_host(&ctx, grant)
            {
                return false;
            }
            match ctx.eval_with_options::<Value, _>(code, options("<snippet>", false)).catch(&ctx) {
                Ok(_) => true,
                Err(err) => {
                    js.report(&ctx, err, false);
                    false
                }
            }
        });
        if !ran {
            return Status::Raised;
        }
        js.settle()
    }
}

impl exports::plimsoll::engine::lines::Guest for Engine {
    type Program = lines::Program;
}

/// A session's JavaScript interpreter: one context kept across cells.
pub struct Interpreter {
    js: Js,
    files: Files,
}

impl GuestInterpreter for Interpreter {
    fn new() -> Self {
        reseed();
        let files: Files = Rc::default();
        match Js::new(Some(files.clone())) {
            Ok(js) => Interpreter { js, files },
            // The prelude is fixed and tested; failing here means memory ran out
            // before any caller code, which the host reports as a trap.
            Err(e) => panic!("{e}"),
        }
    }

    fn write_file(&self, path: String, content: Vec<u8>) {
        self.files.borrow_mut().insert(path, content);
    }

    fn grant(&self, grant: Grant) -> Status {
        if !self.js.ctx.with(|ctx| self.js.install_host(&ctx, grant)) {
            return Status::Raised;
        }
        self.js.settle()
    }

    fn cell(&self, code: String, number: u32) -> Status {
        let js = &self.js;
        let name = format!("<cell {number}>");
        let shown = js.ctx.with(|ctx| {
            let code = redeclare::redeclarable(&code);
            let promise = match ctx.eval_with_options::<Promise, _>(code, options(&name, true)).catch(&ctx) {
                Ok(p) => p,
                Err(err) => {
                    js.report(&ctx, err, false);
                    return None;
                }
            };
            Some(Persistent::save(&ctx, promise))
        });
        let Some(promise) = shown else {
            return Status::Raised;
        };
        let status = js.settle();
        js.ctx.with(|ctx| {
            let Ok(promise) = promise.restore(&ctx) else {
                return Status::Raised;
            };
            match promise.result::<Value>() {
                Some(Ok(done)) => {
                    let value = done.as_object().and_then(|o| o.get::<_, Value>("value").ok()).unwrap_or(done);
                    // A trailing promise shows as what it settled to, as a container
                    // session's cell shows it; one still pending shows as itself.
                    let value = match value.as_promise().and_then(|p| p.result::<Value>()) {
                        Some(Ok(settled)) => settled,
                        Some(Err(_)) => {
                            let err = ctx.catch();
                            js.report(&ctx, CaughtError::Value(err), false);
                            return Status::Raised;
                        }
                        None => value,
                    };
                    if !value.is_undefined() {
                        let text = js
                            .helper(&ctx, "display")
                            .and_then(|inspect| inspect.call::<_, String>((value,)))
                            .unwrap_or_default();
                        write(Channel::Stdout, format!("{text}\n").as_bytes());
                    }
                    status
                }
                Some(Err(_)) => {
                    let err = ctx.catch();
                    js.report(&ctx, CaughtError::Value(err), false);
                    Status::Raised
                }
                None => status,
            }
        })
    }
}

/// QuickJS's scratch space for `js_atod` (dtoa.h's `JSATODTempMem`).
#[repr(C)]
pub struct AtodMem([u64; 27]);

/// QuickJS's scratch space for `js_dtoa` (dtoa.h's `JSDTOATempMem`).
#[repr(C)]
pub struct DtoaMem([u64; 37]);

/// `js_dtoa`'s free format with the exponent when due: flags 0.
const DTOA_FREE_AUTO: c_int = 0;

unsafe extern "C" {
    /// QuickJS's own parser (`--wrap` renames it).
    fn __real_js_atod(s: *const c_char, next: *mut *const c_char, radix: c_int, flags: c_int, mem: *mut AtodMem)
    -> f64;
    /// QuickJS's own printer (`--wrap` renames it).
    fn __real_js_dtoa(buf: *mut c_char, d: f64, radix: c_int, digits: c_int, flags: c_int, mem: *mut DtoaMem) -> c_int;
}

/// QuickJS's `js_atod`, with [`plimsoll_jsnum::parse_decimal`] in front for a plain
/// decimal (see `build.rs`): the same value, without multi-precision arithmetic.
///
/// # Safety
///
/// QuickJS's contract: `s` is NUL-terminated, `mem` points at its scratch space.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_js_atod(
    s: *const c_char,
    next: *mut *const c_char,
    radix: c_int,
    flags: c_int,
    mem: *mut AtodMem,
) -> f64 {
    // Only JS_ATOD_INT_ONLY (1) may be set: the other flags widen the syntax, and
    // a caller asking where the number ended wants QuickJS's scan.
    if radix == 10 && next.is_null() && flags & !1 == 0 {
        // SAFETY: QuickJS passes a NUL-terminated string (its own `js_atof` buffer).
        let text = unsafe { CStr::from_ptr(s) }.to_bytes();
        if let Some(d) = plimsoll_jsnum::parse_decimal(text) {
            return d;
        }
    }
    // SAFETY: the caller's arguments, unchanged, to the function they were meant for.
    unsafe { __real_js_atod(s, next, radix, flags, mem) }
}

/// QuickJS's `js_dtoa`, with [`plimsoll_jsnum::write`] in front for free format in
/// radix 10 (`String(x)`; see `build.rs`): QuickJS's text, except just above some
/// powers of two, where it is node's shortest one, as ECMAScript asks.
///
/// # Safety
///
/// QuickJS's contract: `buf` holds `js_dtoa_max_len` bytes and a NUL, `mem` points
/// at its scratch space.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_js_dtoa(
    buf: *mut c_char,
    d: f64,
    radix: c_int,
    digits: c_int,
    flags: c_int,
    mem: *mut DtoaMem,
) -> c_int {
    if radix == 10 && flags == DTOA_FREE_AUTO {
        let mut text = [0u8; plimsoll_jsnum::MAX];
        let len = plimsoll_jsnum::write(d, &mut text);
        // SAFETY: QuickJS sizes `buf` as js_dtoa_max_len + 1 bytes, 26 for radix 10
        // in free format, and `write` writes at most 25 (a sign, `0.`, five zeros and
        // 17 digits), so the number and its NUL fit; `text` is ours.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), len);
            *buf.add(len) = 0;
        }
        return len as c_int;
    }
    // SAFETY: the caller's arguments, unchanged, to the function they were meant for.
    unsafe { __real_js_dtoa(buf, d, radix, digits, flags, mem) }
}
