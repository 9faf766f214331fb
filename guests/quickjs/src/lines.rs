//! Line programs (`plimsoll:engine/lines`): node programs that read standard input a
//! line at a time and answer on standard output, such as the simulation judge's
//! controllers, run unchanged on QuickJS.
//!
//! A program gets its own context (the pre-initialised one when the instance still
//! has it) with the prelude and then `node.js`, the part of node's API such programs
//! use. Its file is compiled when the program is made: as CommonJS, or as an ES module
//! when it names itself `.mjs`, or when it does not compile as CommonJS but does as a
//! module (node 22's detection: module syntax makes a module). Each call then runs
//! JavaScript, drains promise jobs and the callbacks due now, and says where the
//! program stands.
//!
//! `process.exit` throws a sentinel: an `Error` flagged with QuickJS's uncatchable bit,
//! so no `catch` or `finally` in the program runs after it. The exit code lives on
//! the Rust side, which checks it before anything else after every call into the
//! engine; from then on the runtime's interrupt handler stops any code a native
//! path might still reach (a promise executor catches even uncatchable errors) and
//! the console drops anything written, so nothing after the exit is seen.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::rc::Rc;

use rquickjs::context::intrinsic;
use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::{Declared, WriteOptions};
use rquickjs::{
    CatchResultExt, CaughtError, Context, Ctx, Exception, Function, Module, Object, Persistent, Runtime, TypedArray,
    Value, qjs,
};

use crate::exports::plimsoll::engine::lines::{GuestProgram, State};
use crate::plimsoll::engine::console::{Channel, write};
use crate::{Js, READY, reseed};

/// node's API for line programs: events, standard streams, readline, process, timers.
const NODE: &str = include_str!("node.js");

/// The name `node.js` is compiled under (its stack frames show it). No `import` can
/// reach it: the resolver knows only the built-in modules and the program.
const NODE_NAME: &str = "<plimsoll node>";

thread_local! {
    /// `node.js` as QuickJS bytecode, compiled by `prepare` when the build
    /// pre-initialises the component: a program reads it instead of parsing the
    /// source (about 2 ms a program). Leaked, because QuickJS reads it in place.
    static NODE_BYTECODE: Cell<Option<&'static [u8]>> = const { Cell::new(None) };
}

/// Compiles `node.js` to bytecode in a runtime of its own (nothing of it reaches the
/// context snippets get); a program parses the source instead when this failed.
pub(crate) fn prepare() {
    let compiled = (|| -> rquickjs::Result<Vec<u8>> {
        let rt = Runtime::new()?;
        // Compiling needs no built-in but the parser and the regular expression compiler.
        let ctx = Context::custom::<(intrinsic::Eval, intrinsic::RegExpCompiler)>(&rt)?;
        ctx.with(|ctx| Module::declare(ctx, NODE_NAME, NODE)?.write(WriteOptions::default()))
    })();
    if let Ok(bytes) = compiled {
        NODE_BYTECODE.with(|b| b.set(Some(Box::leak(bytes.into_boxed_slice()))));
    }
}

/// `node.js` as a module of `ctx`: read from the bytecode, or compiled from source.
fn node_module<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Module<'js, Declared>> {
    match NODE_BYTECODE.with(Cell::get) {
        // SAFETY: the bytes are what `Module::write` made of NODE in `prepare`, with
        // this same QuickJS, and they live for the whole instance, as reading them in
        // place (JS_READ_OBJ_ROM_DATA) requires.
        Some(bytes) => unsafe { Module::load(ctx.clone(), bytes) },
        None => Module::declare(ctx.clone(), NODE_NAME, NODE),
    }
}

/// The end of every missing-module message.
const PROVIDED: &str = "the controller engine provides readline and process only";

/// The ES modules a program may import (the canonical `node:` names), each taking
/// its object from `import.meta.module`, which the Rust side sets when it declares it.
const BUILTINS: [(&str, &str); 2] = [
    (
        "node:readline",
        "const m = import.meta.module;\nexport default m;\nexport const { Interface, createInterface, clearLine, \
         clearScreenDown, cursorTo, moveCursor, emitKeypressEvents } = m;\n",
    ),
    (
        "node:process",
        "const p = import.meta.module;\nexport default p;\nexport const { argv, argv0, execArgv, env, title, stdin, \
         stdout, stderr, nextTick, cwd, uptime, hrtime, exit } = p;\nexport const on = p.on.bind(p), once = \
         p.once.bind(p), off = p.off.bind(p), emit = p.emit.bind(p), addListener = p.addListener.bind(p), \
         removeListener = p.removeListener.bind(p);\n",
    ),
];

/// The exit status `process.exit` asked for, shared by the native `exit`, the
/// interrupt handler and the program.
type Exit = Rc<Cell<Option<i32>>>;

/// The node shim's entry points (see the head of `node.js`).
struct Shim {
    feed: Persistent<Function<'static>>,
    close: Persistent<Function<'static>>,
    step: Persistent<Function<'static>>,
    finish: Persistent<Function<'static>>,
    commonjs: Persistent<Function<'static>>,
    esm: Persistent<Function<'static>>,
}

/// What `start` will run.
enum Main {
    /// The CommonJS wrapper function.
    CommonJs(Persistent<Function<'static>>),
    /// An ES module declared under the program's name, evaluated by importing it.
    Module(String),
    /// The file did not compile: the error, reported by `start`.
    Invalid(Persistent<Value<'static>>),
}

/// Where a program is between calls.
enum Stage {
    /// Made, not started.
    Made(Main),
    /// Started and still listening.
    Running,
    /// Ended: every later call answers the same state and runs nothing.
    Over(State),
}

/// One line program: its context, the shim, and where it stands.
pub struct Program {
    // Fields drop in order: every `Persistent` goes before the runtime in `js`.
    shim: Shim,
    stage: RefCell<Stage>,
    exit: Exit,
    js: Js,
}

/// Resolves `import` specifiers: the built-in modules by either name, the program's
/// own file by its name; anything else fails as node fails for a missing module.
struct Modules {
    main: String,
}

impl Resolver for Modules {
    fn resolve<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        _base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        if name == self.main {
            return Ok(name.to_string());
        }
        let bare = name.strip_prefix("node:").unwrap_or(name);
        match BUILTINS.iter().find(|(canonical, _)| canonical.strip_prefix("node:") == Some(bare)) {
            Some((canonical, _)) => Ok((*canonical).to_string()),
            None => Err(not_found(ctx, name)),
        }
    }
}

impl Loader for Modules {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        // Every module a resolved name can reach was declared when the program was made.
        Err(not_found(ctx, name))
    }
}

/// Throws node's error for a module it cannot find, naming what exists instead.
fn not_found(ctx: &Ctx<'_>, name: &str) -> rquickjs::Error {
    let message = format!("Cannot find module '{name}': {PROVIDED}");
    match Exception::from_message(ctx.clone(), &message) {
        Ok(error) => {
            if let Err(e) = error.as_object().set("code", "ERR_MODULE_NOT_FOUND") {
                return e;
            }
            ctx.throw(error.into_value())
        }
        Err(e) => e,
    }
}

/// The CommonJS wrapper: node's module function around the file. Its head takes the
/// two lines before the file's first (see [`eval_from`]), so every line and column in
/// an error is the file's own.
fn wrap(code: &str) -> String {
    let mut out = String::with_capacity(code.len() + 80);
    out.push_str("(function (exports, require, module, __filename, __dirname) {\n\n");
    out.push_str(code);
    out.push_str("\n})");
    out
}

/// The number of the wrapper's first line: its head is lines -1 and 0, the file
/// starts at line 1. (QuickJS reads a first line of 0 as 1, hence two head lines.)
const WRAPPER_FIRST_LINE: i32 = -1;

/// Evaluates `source` as a global, non-strict script named `name` whose first line
/// is numbered `first_line` (rquickjs's `eval` always starts at 1).
fn eval_from<'js>(ctx: &Ctx<'js>, source: String, name: &str, first_line: i32) -> rquickjs::Result<Value<'js>> {
    let len = source.len();
    let source = CString::new(source)?;
    let name = CString::new(name)?;
    let mut options = qjs::JSEvalOptions {
        version: qjs::JS_EVAL_OPTIONS_VERSION as i32,
        eval_flags: qjs::JS_EVAL_TYPE_GLOBAL as i32,
        filename: name.as_ptr(),
        line_num: first_line,
    };
    // SAFETY: the context is live for `ctx`'s lifetime; `source` is NUL-terminated
    // at `len` (JS_Eval2 requires it), and `source`, `name` and `options` outlive
    // the call, which copies what it keeps.
    let value = unsafe { qjs::JS_Eval2(ctx.as_raw().as_ptr(), source.as_ptr(), len as qjs::size_t, &mut options) };
    // SAFETY: JS_Eval2 returns an owned value or the exception marker; the marker
    // is checked first, and an owned value is handed to rquickjs, which frees it.
    unsafe {
        if qjs::JS_VALUE_GET_TAG(value) == qjs::JS_TAG_EXCEPTION {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), value))
    }
}

/// A `#!` first line becomes a comment of the same length, as node ignores it.
fn without_hashbang(code: String) -> String {
    match code.strip_prefix("#!") {
        Some(rest) => format!("//{rest}"),
        None => code,
    }
}

/// Where a syntax error points, (line, column), read from its stack's `at` line.
fn position(err: &CaughtError<'_>) -> Option<(u32, u32)> {
    let CaughtError::Exception(e) = err else {
        return None;
    };
    let stack = e.stack()?;
    let at = stack.lines().find_map(|l| l.trim_start().strip_prefix("at "))?;
    let mut parts = at.trim_end_matches(')').rsplitn(3, ':');
    let column = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    Some((line, column))
}

/// A caught error as a value that can be kept.
fn thrown<'js>(ctx: &Ctx<'js>, err: CaughtError<'js>) -> Value<'js> {
    match err {
        CaughtError::Exception(e) => e.into_value(),
        CaughtError::Value(v) => v,
        CaughtError::Error(e) => rquickjs::String::from_str(ctx.clone(), &e.to_string())
            .map(|s| s.into_value())
            .unwrap_or_else(|_| Value::new_undefined(ctx.clone())),
    }
}

impl Program {
    /// Builds the context, installs the shim and compiles the program.
    fn make(code: String, name: String) -> Result<Program, String> {
        let js = match READY.with(|r| r.borrow_mut().take()) {
            Some(js) => js,
            None => Js::new(None)?,
        };
        let exit: Exit = Rc::default();
        let flag = exit.clone();
        js.rt.set_interrupt_handler(Some(Box::new(move || flag.get().is_some())));
        js.rt.set_loader(Modules { main: name.clone() }, Modules { main: name.clone() });
        let made = js.ctx.with(|ctx| install(&ctx, &js, &exit, &name, code).catch(&ctx).map_err(|e| e.to_string()));
        let (shim, main) = made.map_err(|e| format!("the engine could not install its node API: {e}"))?;
        Ok(Program { shim, stage: RefCell::new(Stage::Made(main)), exit, js })
    }

    /// Runs `call` (one entry into the program, answering what `step` would) unless
    /// the program has ended, then settles.
    fn drive(&self, call: impl FnOnce(&Ctx<'_>, &Shim) -> rquickjs::Result<i32>) -> State {
        let shim = &self.shim;
        let ran = self.js.ctx.with(|ctx| call(&ctx, shim).catch(&ctx).map_err(|err| self.fail(&ctx, err)));
        let state = match ran {
            Ok(next) => self.settle(shim, next),
            Err(state) => state,
        };
        if !matches!(state, State::Listening) {
            *self.stage.borrow_mut() = Stage::Over(state);
        }
        state
    }

    /// What an error that escaped the program means: the exit sentinel (or anything
    /// after an exit) is the exit; anything else is reported and ends the program.
    fn fail<'js>(&self, ctx: &Ctx<'js>, err: CaughtError<'js>) -> State {
        if let Some(code) = self.exit.get() {
            return State::Exited(code);
        }
        self.js.report(ctx, err, false);
        State::Raised
    }

    /// Runs promise jobs and the callbacks due now until nothing is left, and says
    /// where the program stands. `next` is what the last entry said `step` would
    /// answer; it holds while no promise job runs, which spares the common call
    /// (a synchronous handler) a second entry.
    fn settle(&self, shim: &Shim, next: i32) -> State {
        let mut next = Some(next);
        loop {
            loop {
                match self.js.rt.execute_pending_job() {
                    Ok(true) => next = None,
                    Ok(false) => break,
                    Err(job) => {
                        return job.0.with(|ctx| {
                            let thrown = ctx.catch();
                            self.fail(&ctx, CaughtError::Value(thrown))
                        });
                    }
                }
            }
            if let Some(code) = self.exit.get() {
                return State::Exited(code);
            }
            if self.js.report_unhandled() {
                return State::Raised;
            }
            if let Some(known @ (0 | -1)) = next.take() {
                return if known == 0 { State::Listening } else { self.finish(shim) };
            }
            let stepped = self.js.ctx.with(|ctx| {
                shim.step
                    .clone()
                    .restore(&ctx)
                    .and_then(|step| step.call::<_, i32>(()))
                    .catch(&ctx)
                    .map_err(|err| self.fail(&ctx, err))
            });
            if let Some(code) = self.exit.get() {
                return State::Exited(code);
            }
            match stepped {
                Ok(1) => {}
                Ok(0) => return State::Listening,
                Ok(_) => return self.finish(shim),
                Err(state) => return state,
            }
        }
    }

    /// The end of a program nothing keeps alive: its 'exit' listeners, its status.
    fn finish(&self, shim: &Shim) -> State {
        let code = self.js.ctx.with(|ctx| {
            shim.finish
                .clone()
                .restore(&ctx)
                .and_then(|finish| finish.call::<_, i32>(()))
                .catch(&ctx)
                .map_err(|err| self.fail(&ctx, err))
        });
        match (self.exit.get(), code) {
            (Some(code), _) | (None, Ok(code)) => State::Exited(code),
            (None, Err(state)) => state,
        }
    }

    /// Starts a program fed or closed before `start`, and says when there is nothing
    /// to call: the state of a program that ended.
    fn before_call(&self) -> Option<State> {
        if matches!(&*self.stage.borrow(), Stage::Made(_)) {
            let started = GuestProgram::start(self);
            if !matches!(started, State::Listening) {
                return Some(started);
            }
        }
        self.ended()
    }

    /// The state of a program that already ended.
    fn ended(&self) -> Option<State> {
        match &*self.stage.borrow() {
            Stage::Over(state) => Some(*state),
            Stage::Made(_) | Stage::Running => None,
        }
    }
}

/// Installs the node API in `js`'s context and compiles the program.
fn install<'js>(ctx: &Ctx<'js>, js: &Js, exit: &Exit, name: &str, code: String) -> rquickjs::Result<(Shim, Main)> {
    let native = Object::new(ctx.clone())?;
    let quiet = js.quiet.clone();
    native.set(
        "write",
        Function::new(ctx.clone(), move |channel: i32, text: rquickjs::String<'_>| {
            if !quiet.get() {
                write(channel_of(channel), text.to_string().unwrap_or_default().as_bytes());
            }
        })?,
    )?;
    let quiet = js.quiet.clone();
    native.set(
        "writeBytes",
        Function::new(ctx.clone(), move |channel: i32, bytes: TypedArray<'_, u8>| {
            // SAFETY: the slice is copied into the console call before any
            // JavaScript runs again, so the buffer cannot change or detach.
            let bytes = unsafe { bytes.as_bytes() };
            if let (false, Some(bytes)) = (quiet.get(), bytes) {
                write(channel_of(channel), bytes);
            }
        })?,
    )?;
    let (flag, quiet) = (exit.clone(), js.quiet.clone());
    native.set(
        "exit",
        Function::new(ctx.clone(), move |ctx: Ctx<'_>, code: i32| -> rquickjs::Result<()> {
            flag.set(Some(code));
            quiet.set(true);
            let sentinel = Exception::from_message(ctx.clone(), "process.exit")?;
            // SAFETY: both pointers are live for this call (the context we are
            // called in, and an error object we hold); the call only sets the
            // error object's uncatchable bit.
            unsafe {
                qjs::JS_SetUncatchableError(ctx.as_raw().as_ptr(), sentinel.as_value().as_raw());
            }
            Err(ctx.throw(sentinel.into_value()))
        })?,
    )?;
    let (node, _) = node_module(ctx)?.eval()?;
    let setup: Function = node.get("default")?;
    // The working directory is `/`: a relative name is a file there.
    let path = if name.starts_with('/') { name.to_string() } else { format!("/{name}") };
    let api: Object = setup.call((native, path, PROVIDED))?;
    let modules: Object = api.get("modules")?;
    for (canonical, source) in BUILTINS {
        let module = Module::declare(ctx.clone(), canonical, source)?;
        let object: Value = modules.get(canonical.trim_start_matches("node:"))?;
        module.meta()?.set("module", object)?;
    }
    let keep = |key: &str| -> rquickjs::Result<Persistent<Function<'static>>> {
        Ok(Persistent::save(ctx, api.get::<_, Function>(key)?))
    };
    let shim = Shim {
        feed: keep("feed")?,
        close: keep("close")?,
        step: keep("step")?,
        finish: keep("finish")?,
        commonjs: keep("commonjs")?,
        esm: keep("esm")?,
    };
    let meta: Function = api.get("meta")?;
    Ok((shim, compile(ctx, code, name, &meta)))
}

/// Compiles the program: CommonJS first, then, as node 22 detects, an ES module when
/// CommonJS fails and the module compiles (or always for `.mjs`, never for `.cjs`).
fn compile<'js>(ctx: &Ctx<'js>, code: String, name: &str, meta: &Function<'js>) -> Main {
    let code = without_hashbang(code);
    let as_module = |code: &str| {
        let module = Module::declare(ctx.clone(), name, code).catch(ctx)?;
        module.meta().and_then(|m| meta.call::<_, ()>((m,))).catch(ctx)?;
        Ok(Main::Module(name.to_string()))
    };
    let invalid = |err: CaughtError<'js>| Main::Invalid(Persistent::save(ctx, thrown(ctx, err)));
    if name.ends_with(".mjs") {
        return as_module(&code).unwrap_or_else(invalid);
    }
    let commonjs = eval_from(ctx, wrap(&code), name, WRAPPER_FIRST_LINE).catch(ctx);
    let err = match commonjs {
        Ok(value) => {
            return match value.into_function() {
                Some(f) => Main::CommonJs(Persistent::save(ctx, f)),
                None => {
                    let _ = Exception::throw_syntax(ctx, "the program closes its CommonJS wrapper");
                    invalid(CaughtError::Value(ctx.catch()))
                }
            };
        }
        Err(err) => err,
    };
    let syntax = matches!(&err, CaughtError::Exception(e) if e.as_object().get::<_, String>("name").is_ok_and(|n| n == "SyntaxError"));
    if !syntax || name.ends_with(".cjs") {
        return invalid(err);
    }
    match as_module(&code) {
        Ok(main) => main,
        // Both failed: the parse that got further explains the file better (module
        // syntax stops the CommonJS parse early, strict-only errors the module's).
        Err(module_err) if position(&module_err) > position(&err) => invalid(module_err),
        Err(_) => invalid(err),
    }
}

/// The console channel the JavaScript side names (0 stdout, 1 stderr).
fn channel_of(channel: i32) -> Channel {
    if channel == 1 { Channel::Stderr } else { Channel::Stdout }
}

impl GuestProgram for Program {
    fn new(code: String, name: String) -> Self {
        reseed();
        match Program::make(code, name) {
            Ok(program) => program,
            // The shim is fixed and tested; failing here means memory ran out before
            // any program code, which the host reports as a trap.
            Err(e) => panic!("{e}"),
        }
    }

    fn start(&self) -> State {
        if let Some(state) = self.ended() {
            return state;
        }
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Running);
        let Stage::Made(main) = stage else {
            // Started twice: the second start runs nothing.
            return State::Listening;
        };
        self.drive(|ctx, shim| match main {
            Main::CommonJs(f) => {
                let commonjs = shim.commonjs.clone().restore(ctx)?;
                commonjs.call((f.restore(ctx)?,))
            }
            Main::Module(name) => {
                let promise = Module::import(ctx, name)?;
                let esm = shim.esm.clone().restore(ctx)?;
                esm.call((promise,))
            }
            Main::Invalid(error) => Err(ctx.throw(error.restore(ctx)?)),
        })
    }

    fn feed(&self, line: String) -> State {
        if let Some(state) = self.before_call() {
            return state;
        }
        // Scanned here: QuickJS's `indexOf` compares at every position.
        let plain = !line.bytes().any(|b| b == b'\n' || b == b'\r');
        self.drive(|ctx, shim| {
            let feed = shim.feed.clone().restore(ctx)?;
            feed.call((line, plain))
        })
    }

    fn close(&self) -> State {
        if let Some(state) = self.before_call() {
            return state;
        }
        self.drive(|ctx, shim| {
            let close = shim.close.clone().restore(ctx)?;
            close.call(())
        })
    }
}
