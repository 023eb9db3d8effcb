//! An owning wrapper around `cranelift-jit`: host ISA, verify, compile, finalize, call.
//!
//! The life of generated code has two phases, and each has its own type:
//!
//! * [`Jit`] is the open module. Functions are added one at a time with [`Jit::define`]
//!   (from a finished `ir::Function`) or [`Jit::define_with`] (which hands out a
//!   `FunctionBuilder`). Every function is checked by `cranelift_codegen::verify_function`
//!   before it is compiled, so a codegen bug is a [`JitError::Verifier`] naming the function,
//!   not a crash inside Cranelift. With [`JitOptions::compile_threads`] above 1, `define`
//!   verifies, declares and queues a function, and background threads compile queued
//!   functions while the caller emits the next ones (`background.rs`; Cranelift compiles each
//!   function independently); [`Jit::finalize`] waits for them before it links. With
//!   [`JitOptions::capture_dumps`] the input CLIF, the
//!   optimized CLIF and the register-allocated machine code (`vcode`) are kept for `--dump`.
//! * [`JitCode`] is what [`Jit::finalize`] returns: the code is made executable, the module
//!   is frozen, and the handle is `Send + Sync` so kernels can run on pool threads. It owns the
//!   executable memory and frees it on drop; function addresses borrow from it.
//!
//! The ISA is the host's, as `cranelift-native` detects it (SSE4.1, AVX, AVX2, FMA, ... are
//! enabled when present), with `opt_level=speed`. Cranelift 0.135 has no 256-bit vector types
//! on x64, so generated code uses 128-bit vectors (`f32x4`); AVX still helps through the
//! VEX three-operand encodings it selects.
//!
//! Compiling a function is split in two so that a pass of ours can run between Cranelift's
//! mid-end and its lowering: [`Jit::define`] runs the e-graph pass itself (with an ISA at the
//! requested `opt_level`), then interleaves the independent unrolled groups of each block
//! (`interleave.rs` in this module, which must come after the e-graph because its elaboration lays
//! every group out whole), verifies the result again, and hands it to the module, whose ISA
//! has `opt_level=none` so that the e-graph does not run a second time. With
//! [`OptLevel::None`] neither pass runs.
//!
//! Identical functions are compiled once per process. A model repeats each layer's kernels
//! once per layer, and Cranelift's compile (the mid-end, lowering, register allocation) is
//! most of a kernel's cost, so [`Jit::define`] keys every function by its body, Cranelift's
//! `FunctionStencil` (everything but the name; hashed, then compared whole, so a hash
//! collision cannot alias two functions; generated kernels reach their buffers only through
//! their arguments and call helpers at absolute addresses, and a function that names other
//! functions is not shared), together with the ISA's flags and the options. (Printing the
//! CLIF text as the key cost a third of codegen.) A function whose key
//! was defined before in the same module becomes another name for that code; one that a live
//! [`JitCode`] of an earlier module holds is borrowed from it (the new `JitCode` keeps that
//! module alive). A module that captures dumps shares within itself only, so that every
//! function it lists has its dump. [`JitCode::stats`] counts what was compiled and what
//! was shared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::function::FunctionStencil;
use cranelift_codegen::ir::{types, Function, Signature, Type, UserFuncName};
use cranelift_codegen::isa::{OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{print_errors, verify_function, Context};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, ModuleError, ModuleReloc, ModuleRelocTarget};

mod background;
mod interleave;

use interleave::interleave_groups;

/// Everything that can go wrong between building a function and getting its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitError {
    /// Cranelift has no backend for this machine, or it lacks a required feature.
    UnsupportedHost(String),
    /// A Cranelift setting was rejected (a bug in this module, reported rather than panicking).
    Setting(String),
    /// The function failed `verify_function`; `errors` is Cranelift's annotated listing.
    Verifier {
        /// The function's name.
        name: String,
        /// The verifier's report, with the offending instructions marked.
        errors: String,
    },
    /// Compilation, linking or memory protection failed.
    Compile {
        /// The function's name (empty when finalizing the whole module).
        name: String,
        /// What Cranelift reported.
        message: String,
    },
    /// Two functions were given the same name.
    DuplicateName(String),
    /// No finalized function has this name.
    UnknownFunction(String),
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::UnsupportedHost(m) => write!(f, "cannot JIT for this host: {m}"),
            JitError::Setting(m) => write!(f, "bad Cranelift setting: {m}"),
            JitError::Verifier { name, errors } => {
                write!(
                    f,
                    "generated function `{name}` failed verification:\n{errors}"
                )
            }
            JitError::Compile { name, message } => {
                write!(f, "compiling `{name}` failed: {message}")
            }
            JitError::DuplicateName(n) => write!(f, "function `{n}` is defined twice"),
            JitError::UnknownFunction(n) => write!(f, "no compiled function named `{n}`"),
        }
    }
}

impl std::error::Error for JitError {}

/// How much work Cranelift's optimizer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptLevel {
    /// No optimization: fastest compile, for debugging codegen.
    None,
    /// Full optimization (e-graph mid-end, alias analysis): the default.
    Speed,
}

/// Options for a [`Jit`] module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitOptions {
    /// Optimization level; [`OptLevel::Speed`] by default.
    pub opt_level: OptLevel,
    /// Keep the CLIF text and the machine-code listing of every function (costs compile time).
    pub capture_dumps: bool,
    /// Let Cranelift run its verifier again after its own passes, and verify our interleaving
    /// in release builds too (the input is always verified; debug builds verify both).
    pub verify_after_passes: bool,
    /// Threads that compile the module's functions. With more than one, [`Jit::define`]
    /// verifies, declares and queues a function; background workers (up to this many less
    /// one) compile queued functions while the caller defines more, and
    /// [`Jit::finalize`] compiles what is left beside them (a module that captures dumps
    /// compiles at `define`).
    pub compile_threads: usize,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            opt_level: OptLevel::Speed,
            capture_dumps: false,
            verify_after_passes: false,
            compile_threads: 1,
        }
    }
}

/// A function defined but not compiled yet (see [`JitOptions::compile_threads`]).
struct Pending {
    name: String,
    id: FuncId,
    func: Function,
}

/// A compiled function's machine code, ready for `define_function_bytes`.
struct MachineCode {
    alignment: u64,
    bytes: Vec<u8>,
    relocs: Vec<ModuleReloc>,
}

/// The text forms of one compiled function, for `--dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionDump {
    /// The function's name.
    pub name: String,
    /// CLIF as handed to the JIT.
    pub clif: String,
    /// CLIF after Cranelift's mid-end optimizations.
    pub optimized_clif: String,
    /// The lowered machine instructions after register allocation (Cranelift's `vcode`).
    pub vcode: String,
}

/// An open JIT module for the host machine. See the module docs.
pub struct Jit {
    /// Always `Some` until `finalize` moves it out (`Drop` then has nothing to free).
    /// Its ISA has `opt_level=none`: the mid-end runs before the module compiles (see
    /// [`Jit::define`]), so that the group interleaving runs on optimized code.
    module: Option<JITModule>,
    /// The host ISA with the requested `opt_level`, for the mid-end (e-graph) pass.
    optimizer: OwnedTargetIsa,
    ctx: Context,
    builder_ctx: FunctionBuilderContext,
    options: JitOptions,
    /// Every defined name, in definition order, and where its code is.
    functions: Vec<(String, Definition)>,
    dumps: Vec<FunctionDump>,
    /// The ISA's flags and the options, the part of a sharing key that is not the function.
    fingerprint: Arc<str>,
    /// The functions compiled into this module, by body hash, for later definitions here
    /// and, once finalized, for other modules.
    compiled_keys: HashMap<u64, Vec<(Arc<FunctionStencil>, FuncId)>>,
    /// Earlier modules whose code this one's functions use.
    borrowed: Vec<Arc<FrozenModule>>,
    /// The functions borrowed from them, by body hash.
    borrowed_keys: HashMap<u64, Vec<(Arc<FunctionStencil>, JitFunctionInfo)>>,
    /// The module's ISA (`opt_level=none`), owned, for compiling on other threads.
    isa: OwnedTargetIsa,
    /// Functions declared and compiling on other threads (see `background.rs`), with
    /// more than one compile thread; started by the first such definition.
    compiler: Option<background::Compiler>,
    /// Precompiled functions whose body another one claimed (name, claimant's name) that
    /// was not defined yet: each becomes a name for the claimant's code when it is.
    waiting: Vec<(String, String)>,
    stats: JitStats,
}

/// Where a defined function's code is.
#[derive(Debug, Clone)]
enum Definition {
    /// Compiled into this module (possibly under another name too).
    Compiled(FuncId),
    /// Finalized code of an earlier module, kept alive through `Jit::borrowed`.
    Borrowed(JitFunctionInfo),
}

/// How the functions of one module came to be: compiled, or shared (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Functions Cranelift compiled.
    pub compiled: usize,
    /// Definitions that repeated a function defined earlier in the same module.
    pub shared_in_module: usize,
    /// Functions taken from another live module (each counted once).
    pub shared_across_modules: usize,
}

/// A compiled function that a finalized module offers to later modules.
struct SharedFunction {
    fingerprint: Arc<str>,
    body: Arc<FunctionStencil>,
    module: Weak<FrozenModule>,
    info: JitFunctionInfo,
}

type SharedTable = HashMap<u64, Vec<SharedFunction>>;

/// The process-wide table of shareable functions, by body hash. Entries of freed modules
/// are dropped whenever a module registers its own.
fn shared_functions() -> &'static Mutex<SharedTable> {
    static SHARED: OnceLock<Mutex<SharedTable>> = OnceLock::new();
    SHARED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A fast non-cryptographic hash (FxHash's multiply-rotate) of a function body; equal
/// hashes are confirmed by comparing the bodies, so its quality only affects speed.
#[derive(Default)]
struct BodyHasher(u64);

impl Hasher for BodyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes(c.try_into().expect("eight bytes"));
            self.write_u64(word);
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

impl Jit {
    /// A module for the host ISA with default options.
    pub fn new() -> Result<Jit, JitError> {
        Jit::with_options(JitOptions::default())
    }

    /// A module for the host ISA.
    pub fn with_options(options: JitOptions) -> Result<Jit, JitError> {
        let optimizer = cached_host_isa(&options, options.opt_level)?;
        let isa = cached_host_isa(&options, OptLevel::None)?;
        let fingerprint: Arc<str> = Arc::from(format!(
            "{}\n{}\nopt_level={:?} verify_after_passes={}\n",
            isa.flags(),
            isa.isa_flags()
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            options.opt_level,
            options.verify_after_passes,
        ));
        let builder = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
        Ok(Jit {
            module: Some(JITModule::new(builder)),
            optimizer,
            ctx: Context::new(),
            builder_ctx: FunctionBuilderContext::new(),
            options,
            functions: Vec::new(),
            dumps: Vec::new(),
            fingerprint,
            compiled_keys: HashMap::new(),
            borrowed: Vec::new(),
            borrowed_keys: HashMap::new(),
            isa,
            compiler: None,
            waiting: Vec::new(),
            stats: JitStats::default(),
        })
    }

    fn module(&self) -> &JITModule {
        self.module
            .as_ref()
            .expect("the module lives until finalize consumes the Jit")
    }

    fn module_mut(&mut self) -> &mut JITModule {
        self.module
            .as_mut()
            .expect("the module lives until finalize consumes the Jit")
    }

    /// The target ISA (for flags such as FMA, and for `verify_function`).
    pub fn isa(&self) -> &dyn TargetIsa {
        self.module().isa()
    }

    /// The ISA's name and the features Cranelift will use, e.g. `x86_64 has_sse41 has_avx
    /// has_fma ...`, for dumps and reports.
    pub fn isa_summary(&self) -> String {
        let isa = self.isa();
        let mut summary = isa.name().to_string();
        for flag in isa.isa_flags() {
            if flag.as_bool() == Some(true) {
                summary.push(' ');
                summary.push_str(flag.name);
            }
        }
        summary
    }

    /// The integer type of a pointer on the host (`i64` on x86-64).
    pub fn pointer_type(&self) -> Type {
        self.module().target_config().pointer_type()
    }

    /// Whether the ISA has fused multiply-add (so CLIF `fma` is one instruction).
    pub fn has_fma(&self) -> bool {
        isa_has_fma(self.isa())
    }

    /// A signature in the host's default calling convention (`extern "C"` on x86-64 Linux).
    pub fn signature(&self, params: &[Type], returns: &[Type]) -> Signature {
        signature(self.isa(), params, returns)
    }

    /// The module's ISA as a shared handle, for building and verifying functions on other
    /// threads ([`verify`], then [`Jit::define_verified`]).
    pub fn shared_isa(&self) -> OwnedTargetIsa {
        self.isa.clone()
    }

    /// An empty function named `name` (the name shows in CLIF dumps as `%name`).
    pub fn new_function(&self, name: &str, signature: Signature) -> Function {
        Function::with_name_signature(UserFuncName::testcase(name), signature)
    }

    /// Builds a function with a `FunctionBuilder` and defines it. `body` must fill and
    /// terminate every block; it does not need to seal blocks or call `finalize`.
    pub fn define_with<F>(
        &mut self,
        name: &str,
        signature: Signature,
        body: F,
    ) -> Result<(), JitError>
    where
        F: FnOnce(&mut FunctionBuilder<'_>),
    {
        let mut func = self.new_function(name, signature);
        let config = self.module().target_config();
        {
            let mut builder = FunctionBuilder::new(&mut func, &mut self.builder_ctx);
            body(&mut builder);
            builder.seal_all_blocks();
            builder.finalize(config);
        }
        self.define(name, func)
    }

    /// Verifies `func`, compiles it and adds it to the module under `name`; or, when an
    /// identical function was compiled before (see the module docs), adds `name` for that
    /// code instead.
    pub fn define(&mut self, name: &str, func: Function) -> Result<(), JitError> {
        self.define_checked(name, func, false)
    }

    /// [`Jit::define`] for a function [`verify`] passed (for this module's ISA), which is
    /// not verified again: functions built on several threads are verified there.
    pub fn define_verified(&mut self, name: &str, func: Verified) -> Result<(), JitError> {
        self.define_checked(name, func.0, true)
    }

    /// Adds `name` for the function defined as `existing`: the same code under a second
    /// name, for a caller that knows the two functions would be identical (it built
    /// `existing` from the same input; see `CpuProgram::compile`'s twins), so that the
    /// second is neither built nor hashed. An `existing` that waits for the code of a
    /// precompiled function (see [`Jit::define_precompiled`]) makes `name` wait for it too.
    pub fn define_same_as(&mut self, name: &str, existing: &str) -> Result<(), JitError> {
        if self.functions.iter().any(|(n, _)| n == name) {
            return Err(JitError::DuplicateName(name.to_string()));
        }
        let found = self
            .functions
            .iter()
            .find(|(n, _)| n == existing)
            .map(|(_, d)| d.clone());
        let Some(definition) = found else {
            let claimant = self
                .waiting
                .iter()
                .find(|(n, _)| n == existing)
                .map(|(_, other)| other.clone())
                .ok_or_else(|| JitError::UnknownFunction(existing.to_string()))?;
            self.waiting.push((name.to_string(), claimant));
            return Ok(());
        };
        if let Some(dump) = self.dumps.iter().find(|d| d.name == existing) {
            let dump = FunctionDump {
                name: name.to_string(),
                ..dump.clone()
            };
            self.dumps.push(dump);
        }
        self.functions.push((name.to_string(), definition));
        self.stats.shared_in_module += 1;
        Ok(())
    }

    fn define_checked(
        &mut self,
        name: &str,
        func: Function,
        verified: bool,
    ) -> Result<(), JitError> {
        if self.functions.iter().any(|(n, _)| n == name) {
            return Err(JitError::DuplicateName(name.to_string()));
        }
        let key = sharing_key(&func);
        if let Some(hash) = key {
            if self.reuse(name, hash, &func.stencil) {
                return Ok(());
            }
        }
        let body = key.map(|hash| (hash, Arc::new(func.stencil.clone())));
        // Verified before it is queued: a rejected function is this call's error, and the
        // module stays usable for the others.
        let func = if verified {
            func
        } else {
            verify(self.module().isa(), name, func)?.0
        };
        let background = self.options.compile_threads > 1 && !self.options.capture_dumps;
        let clif = if self.options.capture_dumps {
            func.display().to_string()
        } else {
            String::new()
        };
        let id = self
            .module_mut()
            .declare_function(name, Linkage::Export, &func.signature)
            .map_err(|e| module_error(name, e))?;
        if background {
            self.compiler
                .get_or_insert_with(|| {
                    background::Compiler::new(
                        self.options.compile_threads,
                        self.optimizer.clone(),
                        self.isa.clone(),
                        self.options.opt_level,
                    )
                })
                .submit(Pending {
                    name: name.to_string(),
                    id,
                    func,
                });
            self.functions
                .push((name.to_string(), Definition::Compiled(id)));
            if let Some((hash, body)) = body {
                self.compiled_keys.entry(hash).or_default().push((body, id));
            }
            self.stats.compiled += 1;
            return Ok(());
        }
        self.ctx.clear();
        self.ctx.func = func;
        self.ctx.set_disasm(self.options.capture_dumps);
        if let Err(e) = self.optimize(name) {
            self.ctx.clear();
            return Err(e);
        }
        let module = self
            .module
            .as_mut()
            .expect("the module lives until finalize consumes the Jit");
        let defined = module.define_function(id, &mut self.ctx);
        if let Err(e) = defined {
            let message = match e {
                ModuleError::Compilation(err) => print_errors::pretty_error(&self.ctx.func, err),
                other => other.to_string(),
            };
            self.ctx.clear();
            return Err(JitError::Compile {
                name: name.to_string(),
                message,
            });
        }
        if self.options.capture_dumps {
            let vcode = self
                .ctx
                .compiled_code()
                .and_then(|c| c.vcode.clone())
                .unwrap_or_default();
            self.dumps.push(FunctionDump {
                name: name.to_string(),
                clif,
                optimized_clif: self.ctx.func.display().to_string(),
                vcode,
            });
        }
        self.ctx.clear();
        self.functions
            .push((name.to_string(), Definition::Compiled(id)));
        if let Some((hash, body)) = body {
            self.compiled_keys.entry(hash).or_default().push((body, id));
        }
        self.stats.compiled += 1;
        Ok(())
    }

    /// Defines `name` as a function compiled before with this body, in this module or in a
    /// live earlier one; false when there is none.
    fn reuse(&mut self, name: &str, hash: u64, body: &FunctionStencil) -> bool {
        if self.reuse_local(name, hash, body) {
            return true;
        }
        if self.options.capture_dumps {
            return false;
        }
        match lookup_shared(&self.fingerprint, hash, body) {
            Some(found) => {
                self.adopt(name, hash, found);
                true
            }
            None => false,
        }
    }

    /// Defines `name` as a function with this body compiled into this module, or borrowed
    /// by it, before; false when there is none.
    fn reuse_local(&mut self, name: &str, hash: u64, body: &FunctionStencil) -> bool {
        let local = self
            .compiled_keys
            .get(&hash)
            .and_then(|v| v.iter().find(|(b, _)| **b == *body))
            .map(|&(_, id)| id);
        if let Some(id) = local {
            if self.options.capture_dumps {
                let first = self.functions.iter().find_map(|(n, d)| match d {
                    Definition::Compiled(f) if *f == id => Some(n.clone()),
                    _ => None,
                });
                if let Some(dump) = first.and_then(|n| self.dumps.iter().find(|d| d.name == n)) {
                    let dump = FunctionDump {
                        name: name.to_string(),
                        ..dump.clone()
                    };
                    self.dumps.push(dump);
                }
            }
            self.functions
                .push((name.to_string(), Definition::Compiled(id)));
            self.stats.shared_in_module += 1;
            return true;
        }
        let borrowed = self
            .borrowed_keys
            .get(&hash)
            .and_then(|v| v.iter().find(|(b, _)| **b == *body))
            .map(|(_, info)| info.clone());
        if let Some(info) = borrowed {
            self.functions
                .push((name.to_string(), Definition::Borrowed(info)));
            self.stats.shared_in_module += 1;
            return true;
        }
        false
    }

    /// Defines `name` as `found`, a function of an earlier live module.
    fn adopt(&mut self, name: &str, hash: u64, found: SharedFound) {
        let SharedFound { module, info, body } = found;
        if !self.borrowed.iter().any(|m| Arc::ptr_eq(m, &module)) {
            self.borrowed.push(module);
        }
        self.borrowed_keys
            .entry(hash)
            .or_default()
            .push((body, info.clone()));
        self.functions
            .push((name.to_string(), Definition::Borrowed(info)));
        self.stats.shared_across_modules += 1;
    }

    /// A compiler of this module's functions for any thread ([`Precompiler::compile`],
    /// then [`Jit::define_precompiled`] here): callers that build functions on several
    /// threads compile each where it was built, as soon as it is, instead of queueing
    /// them all for [`Jit::define`]. `None` for a module that captures dumps (those
    /// compile at `define`).
    pub fn precompiler(&self) -> Option<Precompiler> {
        (!self.options.capture_dumps).then(|| Precompiler {
            optimizer: self.optimizer.clone(),
            isa: self.isa.clone(),
            opt_level: self.options.opt_level,
            fingerprint: self.fingerprint.clone(),
            claims: Arc::default(),
        })
    }

    /// Adds a function compiled by this module's [`Jit::precompiler`] under its name: its
    /// code, or the code of an identical function compiled into this module before (the
    /// second compile is then dropped), or an earlier module's that the precompiler found.
    /// The functions of one precompiler may come in any order: one whose body another
    /// claimed (on another thread) waits for that one's definition.
    pub fn define_precompiled(&mut self, p: Precompiled) -> Result<(), JitError> {
        let name = p.name.clone();
        self.define_made(p)?;
        // The functions that waited for this one's code.
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(_, other)| *other == name);
        self.waiting = waiting;
        for (same, _) in ready {
            self.define_same_as(&same, &name)?;
        }
        Ok(())
    }

    fn define_made(&mut self, p: Precompiled) -> Result<(), JitError> {
        let Precompiled {
            name,
            signature,
            body,
            made,
        } = p;
        if self.functions.iter().any(|(n, _)| *n == name) {
            return Err(JitError::DuplicateName(name));
        }
        if let Some((hash, body)) = &body {
            if self.reuse_local(&name, *hash, body) {
                return Ok(());
            }
        }
        let mut code = match made {
            Made::Same(other) => {
                self.waiting.push((name, other));
                return Ok(());
            }
            Made::Shared(found) => {
                let hash = body.as_ref().map_or(0, |(h, _)| *h);
                self.adopt(&name, hash, found);
                return Ok(());
            }
            Made::Code(code) => code,
        };
        let id = self
            .module_mut()
            .declare_function(&name, Linkage::Export, &signature)
            .map_err(|e| module_error(&name, e))?;
        for r in &mut code.relocs {
            if let ModuleRelocTarget::FunctionOffset(f, offset) = r.name {
                if f == precompiled_id() {
                    r.name = ModuleRelocTarget::FunctionOffset(id, offset);
                }
            }
        }
        self.module_mut()
            .define_function_bytes(id, code.alignment, &code.bytes, &code.relocs)
            .map_err(|e| module_error(&name, e))?;
        self.functions.push((name, Definition::Compiled(id)));
        if let Some((hash, body)) = body {
            self.compiled_keys.entry(hash).or_default().push((body, id));
        }
        self.stats.compiled += 1;
        Ok(())
    }

    /// The mid-end on `self.ctx.func` (see [`optimize_function`]).
    fn optimize(&mut self, name: &str) -> Result<(), JitError> {
        let isa = self
            .module
            .as_ref()
            .expect("the module lives until finalize consumes the Jit")
            .isa();
        optimize_function(
            &mut self.ctx,
            &*self.optimizer,
            isa,
            self.options.opt_level,
            name,
        )
    }

    /// Waits for the functions compiling in the background (compiling the rest on this
    /// thread too) and adds their code to the module. The first failure, in definition
    /// order, is the error.
    fn compile_pending(&mut self) -> Result<(), JitError> {
        let Some(compiler) = self.compiler.take() else {
            return Ok(());
        };
        let done = compiler.finish();
        let module = self
            .module
            .as_mut()
            .expect("the module lives until finalize consumes the Jit");
        for c in done {
            let code = c.code?;
            module
                .define_function_bytes(c.pending.id, code.alignment, &code.bytes, &code.relocs)
                .map_err(|e| module_error(&c.pending.name, e))?;
        }
        Ok(())
    }

    /// Makes every defined function executable and freezes the module.
    pub fn finalize(mut self) -> Result<JitCode, JitError> {
        if let Some((_, other)) = self.waiting.first() {
            return Err(JitError::UnknownFunction(other.clone()));
        }
        self.compile_pending()?;
        let mut module = self
            .module
            .take()
            .expect("the module lives until finalize consumes the Jit");
        if let Err(e) = module.finalize_definitions() {
            // SAFETY: finalization failed, so no function address was handed out.
            unsafe { module.free_memory() };
            return Err(module_error("", e));
        }
        let compiled = |id: FuncId| JitFunctionInfo {
            address: module.get_finalized_function(id) as usize,
            signature: module
                .declarations()
                .get_function_decl(id)
                .signature
                .clone(),
        };
        let mut functions = HashMap::new();
        for (name, definition) in &self.functions {
            let info = match definition {
                Definition::Compiled(id) => compiled(*id),
                Definition::Borrowed(info) => info.clone(),
            };
            functions.insert(name.clone(), info);
        }
        let offered: Vec<(u64, Arc<FunctionStencil>, JitFunctionInfo)> =
            std::mem::take(&mut self.compiled_keys)
                .into_iter()
                .flat_map(|(hash, v)| v.into_iter().map(move |(body, id)| (hash, body, id)))
                .map(|(hash, body, id)| (hash, body, compiled(id)))
                .collect();
        let module = Arc::new(FrozenModule(Some(module)));
        if !offered.is_empty() {
            let mut table = shared_functions()
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            table.retain(|_, v| {
                v.retain(|f| f.module.strong_count() > 0);
                !v.is_empty()
            });
            for (hash, body, info) in offered {
                table.entry(hash).or_default().push(SharedFunction {
                    fingerprint: self.fingerprint.clone(),
                    body,
                    module: Arc::downgrade(&module),
                    info,
                });
            }
        }
        Ok(JitCode {
            module,
            borrowed: std::mem::take(&mut self.borrowed),
            functions,
            dumps: std::mem::take(&mut self.dumps),
            stats: self.stats,
        })
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the module was never finalized, so no function address was handed out
            // and nothing can call into the memory being freed.
            unsafe { module.free_memory() };
        }
    }
}

/// The mid-end on `ctx.func`: Cranelift's e-graph pass (GVN, LICM, algebraic rewrites)
/// with `optimizer`, then the interleaving of independent unrolled groups (see
/// `interleave.rs`), which has to come after the e-graph because its elaboration lays each
/// group out whole again, and (in debug builds, or with `verify_after_passes`) a second
/// verification against `isa`. The module's own ISA has
/// `opt_level=none`, so compiling does not run the e-graph a second time.
fn optimize_function(
    ctx: &mut Context,
    optimizer: &dyn TargetIsa,
    isa: &dyn TargetIsa,
    opt_level: OptLevel,
    name: &str,
) -> Result<(), JitError> {
    if opt_level == OptLevel::None {
        return Ok(());
    }
    let failed = |message: String| JitError::Compile {
        name: name.to_string(),
        message,
    };
    let mut plane = ControlPlane::default();
    ctx.optimize(optimizer, &mut plane)
        .map_err(|e| failed(print_errors::pretty_error(&ctx.func, e)))?;
    interleave_groups(&mut ctx.func);
    // The reordering is ours, so its output is checked as strictly as the input wherever
    // debug assertions are on (the test suites and the fuzz replays run so) or the options
    // ask for verification after passes (the ISA's `enable_verifier`). In a release build
    // it was 3% of compiling GPT-2.
    if cfg!(debug_assertions) || isa.flags().enable_verifier() {
        verify_function(&ctx.func, isa).map_err(|errors| {
            failed(format!(
                "interleaving `{name}` broke the function:\n{}",
                print_errors::pretty_verifier_error(&ctx.func, None, errors)
            ))
        })?;
    }
    Ok(())
}

/// Optimizes and compiles `ctx.func` (pending as `p`) to machine code, as the module's
/// `define_function` would, so that it can run on another thread.
fn compile_function(
    ctx: &mut Context,
    optimizer: &dyn TargetIsa,
    isa: &dyn TargetIsa,
    opt_level: OptLevel,
    p: &Pending,
) -> Result<MachineCode, JitError> {
    optimize_function(ctx, optimizer, isa, opt_level, &p.name)?;
    let mut plane = ControlPlane::default();
    let alignment = ctx
        .compile(isa, &mut plane)
        .map_err(|e| JitError::Compile {
            name: p.name.clone(),
            message: print_errors::pretty_error(e.func, e.inner),
        })?
        .buffer
        .alignment as u64;
    let code = ctx
        .compiled_code()
        .expect("a function that compiled has its code");
    Ok(MachineCode {
        alignment,
        bytes: code.code_buffer().to_vec(),
        relocs: code
            .buffer
            .relocs()
            .iter()
            .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, p.id))
            .collect(),
    })
}

/// A function of an earlier live module with the same body and settings.
struct SharedFound {
    module: Arc<FrozenModule>,
    info: JitFunctionInfo,
    body: Arc<FunctionStencil>,
}

/// The function with this body that a live module compiled with the same settings
/// (`fingerprint`), from the process-wide table.
fn lookup_shared(fingerprint: &Arc<str>, hash: u64, body: &FunctionStencil) -> Option<SharedFound> {
    let table = shared_functions()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    table.get(&hash).and_then(|v| {
        v.iter().find_map(|f| {
            let same = f.fingerprint == *fingerprint && *f.body == *body;
            let module = f.module.upgrade().filter(|_| same)?;
            Some(SharedFound {
                module,
                info: f.info.clone(),
                body: f.body.clone(),
            })
        })
    })
}

/// The id a precompiled function's self-references carry until
/// [`Jit::define_precompiled`] declares it and puts its own id in their place.
fn precompiled_id() -> FuncId {
    // The largest id an entity may have (`u32::MAX` is its reserved value): a module
    // never declares that many functions.
    FuncId::from_u32(u32::MAX - 1)
}

/// Compiles functions for one [`Jit`] module on any thread (see [`Jit::precompiler`]):
/// the same mid-end, interleaving and Cranelift compile as [`Jit::define`], and the same
/// process-wide sharing (a function a live module compiled before is not compiled again).
/// Functions with equal bodies given to one precompiler are compiled once: the first to
/// arrive claims its body, and the others become names for its code
/// ([`Jit::define_precompiled`] takes them in any order).
#[derive(Clone)]
pub struct Precompiler {
    optimizer: OwnedTargetIsa,
    isa: OwnedTargetIsa,
    opt_level: OptLevel,
    fingerprint: Arc<str>,
    /// The bodies claimed so far, by sharing key, with the name that claimed each.
    claims: Arc<Mutex<Claims>>,
}

/// Bodies by sharing key, with the name of the function that claimed each.
type Claims = HashMap<u64, Vec<(Arc<FunctionStencil>, String)>>;

/// A function [`Precompiler::compile`] made ready for [`Jit::define_precompiled`].
pub struct Precompiled {
    name: String,
    signature: Signature,
    /// The sharing key (see [`sharing_key`]) and the body it hashes.
    body: Option<(u64, Arc<FunctionStencil>)>,
    made: Made,
}

enum Made {
    Code(MachineCode),
    Shared(SharedFound),
    /// The body another function of this precompiler claimed first (by that name).
    Same(String),
}

impl Precompiler {
    /// Compiles `func` (verified for the module's ISA) under `name`, or finds the code of
    /// an identical function a live module compiled before.
    pub fn compile(&self, name: &str, func: Verified) -> Result<Precompiled, JitError> {
        let func = func.0;
        let signature = func.signature.clone();
        let body = sharing_key(&func).map(|hash| (hash, Arc::new(func.stencil.clone())));
        if let Some((hash, stencil)) = &body {
            let made = {
                let mut claims = self
                    .claims
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let same = claims.entry(*hash).or_default();
                match same.iter().find(|(b, _)| **b == **stencil) {
                    Some((_, other)) => Some(Made::Same(other.clone())),
                    None => {
                        same.push((stencil.clone(), name.to_string()));
                        None
                    }
                }
            }
            .or_else(|| lookup_shared(&self.fingerprint, *hash, stencil).map(Made::Shared));
            if let Some(made) = made {
                return Ok(Precompiled {
                    name: name.to_string(),
                    signature,
                    body,
                    made,
                });
            }
        }
        let pending = Pending {
            name: name.to_string(),
            id: precompiled_id(),
            func: Function::new(),
        };
        // One context per thread, cleared between functions: its tables keep their
        // capacity (a fresh one per function allocates them all again). Boxed, so that
        // the thread-local itself is a pointer: the Python extension's thread-locals live
        // in glibc's small static TLS block (mimalloc's initial-exec model), where a
        // whole `Context` does not fit and the module fails to load.
        thread_local! {
            static CONTEXT: RefCell<Option<Box<Context>>> = const { RefCell::new(None) };
        }
        let code = CONTEXT.with_borrow_mut(|slot| {
            let ctx = slot.get_or_insert_with(|| Box::new(Context::new()));
            ctx.clear();
            ctx.func = func;
            let code =
                compile_function(ctx, &*self.optimizer, &*self.isa, self.opt_level, &pending);
            ctx.clear();
            code
        })?;
        Ok(Precompiled {
            name: pending.name,
            signature,
            body,
            made: Made::Code(code),
        })
    }
}

/// The hash of `func`'s body for sharing, or `None` when it must not be shared: it refers
/// to functions by name, which resolve per module.
fn sharing_key(func: &Function) -> Option<u64> {
    if !func.params.user_named_funcs().is_empty() {
        return None;
    }
    let mut h = BodyHasher::default();
    func.stencil.hash(&mut h);
    Some(h.finish())
}

fn module_error(name: &str, e: ModuleError) -> JitError {
    JitError::Compile {
        name: name.to_string(),
        message: e.to_string(),
    }
}

/// A signature in `isa`'s default calling convention.
pub fn signature(isa: &dyn TargetIsa, params: &[Type], returns: &[Type]) -> Signature {
    let mut sig = Signature::new(isa.default_call_conv());
    sig.params.extend(
        params
            .iter()
            .map(|&t| cranelift_codegen::ir::AbiParam::new(t)),
    );
    sig.returns.extend(
        returns
            .iter()
            .map(|&t| cranelift_codegen::ir::AbiParam::new(t)),
    );
    sig
}

/// A function that passed Cranelift's verifier (made by [`verify`]), or one of Ferrite's
/// own kernels that [`verify_emitted`] took as verified in a release build.
pub struct Verified(Function);

impl Verified {
    /// The verified function.
    pub fn function(&self) -> &Function {
        &self.0
    }
}

/// Runs Cranelift's verifier on `func` (named `name` in the error) for `isa`; any thread
/// may, with the module's [`Jit::shared_isa`].
pub fn verify(isa: &dyn TargetIsa, name: &str, func: Function) -> Result<Verified, JitError> {
    match verify_function(&func, isa) {
        Ok(()) => Ok(Verified(func)),
        Err(errors) => Err(JitError::Verifier {
            name: name.to_string(),
            errors: print_errors::pretty_verifier_error(&func, None, errors),
        }),
    }
}

/// [`verify`] for a function that Ferrite's own emitter built, where verifying is worth
/// its cost: in debug builds (the test suites and the fuzz replays run so, and verify
/// every kernel they compile) and with an ISA whose `enable_verifier` is set
/// ([`JitOptions::verify_after_passes`]). A release build takes the function as verified:
/// there the verifier was 3.5% of compiling GPT-2 from its model file, for functions
/// whose every shape the tests verify. A function from elsewhere ([`Jit::define`]) is
/// always verified.
pub fn verify_emitted(
    isa: &dyn TargetIsa,
    name: &str,
    func: Function,
) -> Result<Verified, JitError> {
    if cfg!(debug_assertions) || isa.flags().enable_verifier() {
        verify(isa, name, func)
    } else {
        Ok(Verified(func))
    }
}

/// Whether `isa` has FMA enabled (x86-64 `has_fma`; always true on AArch64).
pub fn isa_has_fma(isa: &dyn TargetIsa) -> bool {
    if isa.name() == "aarch64" {
        return true;
    }
    isa.isa_flags()
        .iter()
        .any(|v| v.name == "has_fma" && v.as_bool() == Some(true))
}

/// [`host_isa`], built once per process for each combination of settings: detecting the
/// host and building the ISA is a fixed cost of every compile otherwise.
fn cached_host_isa(options: &JitOptions, opt_level: OptLevel) -> Result<OwnedTargetIsa, JitError> {
    type Key = (bool, bool);
    static ISAS: OnceLock<Mutex<HashMap<Key, OwnedTargetIsa>>> = OnceLock::new();
    let key = (opt_level == OptLevel::Speed, options.verify_after_passes);
    let mut isas = ISAS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(isa) = isas.get(&key) {
        return Ok(isa.clone());
    }
    let isa = host_isa(options, opt_level)?;
    isas.insert(key, isa.clone());
    Ok(isa)
}

fn host_isa(options: &JitOptions, opt_level: OptLevel) -> Result<OwnedTargetIsa, JitError> {
    let mut flags = settings::builder();
    let set = |flags: &mut settings::Builder, name: &str, value: &str| {
        flags
            .set(name, value)
            .map_err(|e| JitError::Setting(format!("{name}={value}: {e}")))
    };
    let opt = match opt_level {
        OptLevel::None => "none",
        OptLevel::Speed => "speed",
    };
    set(&mut flags, "opt_level", opt)?;
    // cranelift-jit requires non-PIC code; it is also the default.
    set(&mut flags, "is_pic", "false")?;
    let verify = if options.verify_after_passes {
        "true"
    } else {
        "false"
    };
    set(&mut flags, "enable_verifier", verify)?;
    // Kernels may keep up to 64 KiB of stash scratch in their frame (plan/stash.rs):
    // probe it page by page so a deep frame can never step over a stack guard page.
    set(&mut flags, "enable_probestack", "true")?;
    set(&mut flags, "probestack_strategy", "inline")?;
    // Vector `nearest`/`floor` (used by the vector math) lower to SSE4.1 `roundps`; without
    // it Cranelift would need libcalls that have no vector form.
    #[cfg(target_arch = "x86_64")]
    if !std::is_x86_feature_detected!("sse4.1") {
        return Err(JitError::UnsupportedHost(
            "x86-64 without SSE4.1".to_string(),
        ));
    }
    let isa_builder =
        cranelift_native::builder().map_err(|m| JitError::UnsupportedHost(m.to_string()))?;
    isa_builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError::UnsupportedHost(e.to_string()))
}

#[derive(Debug, Clone)]
struct JitFunctionInfo {
    address: usize,
    signature: Signature,
}

/// The finalized `JITModule`, kept only so that its memory can be freed when the last
/// [`JitCode`] using it (its own, or one that borrowed functions from it) is dropped.
struct FrozenModule(Option<JITModule>);

// SAFETY: after `finalize_definitions` the module is never touched again except by
// `FrozenModule::drop`, which runs once, when the last `Arc` goes; its interior `RefCell`
// and raw code pointers are therefore never accessed concurrently, and the code pages
// themselves are read-only.
unsafe impl Send for FrozenModule {}
// SAFETY: nothing reaches into the module through `&self` (see above).
unsafe impl Sync for FrozenModule {}

impl Drop for FrozenModule {
    fn drop(&mut self) {
        if let Some(module) = self.0.take() {
            // SAFETY: every address handed out is a `JitFunction` borrowing a `JitCode` that
            // holds an `Arc` of this module (its own or a borrowed one), so no caller can hold
            // one past this point without an `unsafe` block of its own that promised to keep
            // that `JitCode` alive while calling it; and the shared-function table holds only
            // `Weak` references.
            unsafe { module.free_memory() };
        }
    }
}

/// Finalized machine code: keeps the executable memory alive; `Send + Sync`.
pub struct JitCode {
    /// The module this `Jit` compiled.
    #[allow(dead_code)] // held for its drop
    module: Arc<FrozenModule>,
    /// Earlier modules whose functions this one uses.
    #[allow(dead_code)] // held for their drop
    borrowed: Vec<Arc<FrozenModule>>,
    functions: HashMap<String, JitFunctionInfo>,
    dumps: Vec<FunctionDump>,
    stats: JitStats,
}

impl JitCode {
    /// The address and signature of the function `name`.
    pub fn function(&self, name: &str) -> Result<JitFunction<'_>, JitError> {
        self.functions
            .get(name)
            .map(|info| JitFunction { info, _code: self })
            .ok_or_else(|| JitError::UnknownFunction(name.to_string()))
    }

    /// The names of all functions in the module, sorted.
    pub fn function_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.functions.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The text dumps, in definition order (empty unless `capture_dumps` was set).
    pub fn dumps(&self) -> &[FunctionDump] {
        &self.dumps
    }

    /// The dump of one function, if dumps were captured.
    pub fn dump(&self, name: &str) -> Option<&FunctionDump> {
        self.dumps.iter().find(|d| d.name == name)
    }

    /// How many functions were compiled and how many shared (see the module docs).
    pub fn stats(&self) -> JitStats {
        self.stats
    }
}

impl fmt::Debug for JitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JitCode")
            .field("functions", &self.function_names())
            .finish()
    }
}

/// A finalized function: its entry address and signature, borrowed from its [`JitCode`].
#[derive(Debug, Clone, Copy)]
pub struct JitFunction<'a> {
    info: &'a JitFunctionInfo,
    _code: &'a JitCode,
}

impl<'a> JitFunction<'a> {
    /// The entry address. Turning it into a callable `extern "C" fn` is `unsafe`: the caller
    /// must use the function's exact signature and keep the [`JitCode`] alive while calling.
    pub fn as_ptr(&self) -> *const u8 {
        self.info.address as *const u8
    }

    /// The signature the function was compiled with.
    pub fn signature(&self) -> &'a Signature {
        &self.info.signature
    }

    /// Whether the signature is exactly `params -> returns` (default call convention types).
    pub fn has_signature(&self, params: &[Type], returns: &[Type]) -> bool {
        let sig = &self.info.signature;
        sig.params
            .iter()
            .map(|p| p.value_type)
            .eq(params.iter().copied())
            && sig
                .returns
                .iter()
                .map(|p| p.value_type)
                .eq(returns.iter().copied())
    }
}

/// The pointer-sized integer type on this host, for building signatures without a [`Jit`].
pub const HOST_POINTER: Type = if cfg!(target_pointer_width = "64") {
    types::I64
} else {
    types::I32
};
