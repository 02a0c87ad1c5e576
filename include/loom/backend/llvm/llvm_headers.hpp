/// \file
/// Every LLVM header the CPU backend needs, in one place (layer backend/llvm).
///
/// Only `backend/llvm/impl/*.ipp` and `backend/llvm/module_builder.hpp` (the code generator's
/// header) include this file; `backend/llvm/jit.hpp` never does. It is marked a system header so
/// that LLVM's own warnings do not drown ours, it checks the LLVM version, and it is the one place
/// for shims over LLVM API drift (Halide keeps its `#if LLVM_VERSION >= ...` guards the same way).
///
/// Supported: LLVM 19 (Debian's `llvm-19-dev`). LLVM 14, which Debian bookworm preinstalls, is
/// rejected: its ORC and pass-manager APIs differ too much to shim.
#ifndef LOOM_BACKEND_LLVM_LLVM_HEADERS_HPP
#define LOOM_BACKEND_LLVM_LLVM_HEADERS_HPP

#include "loom/config.hpp"

#if defined(__GNUC__)
#pragma GCC system_header
#endif

// The LLVM includes sit in the #else branches so that a failed check reports one error, not a
// cascade of missing headers.
#if !LOOM_WITH_LLVM
#error "link loom::llvm: the LLVM CPU backend needs LOOM_WITH_LLVM=1 and LLVM 19's include dirs"
#else

#include <llvm/Config/llvm-config.h>

#if !defined(LLVM_VERSION_MAJOR) || LLVM_VERSION_MAJOR < 19
#error "loom's CPU backend needs LLVM 19 (apt install llvm-19-dev); found an older LLVM"
#else
// LLVM 19 is what loom is built and tested with. Newer releases are accepted on a best-effort
// basis: add shims at the bottom as their APIs drift.

// Analysis and IR.
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Type.h>
#include <llvm/IR/Verifier.h>

// ORC JIT.
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/IRCompileLayer.h>
#include <llvm/ExecutionEngine/Orc/IRTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>

// Optimisation pipeline and code generation. The pipeline is run through LLVM's C binding of the
// PassBuilder (LLVMRunPasses, a thin wrapper that builds the same PassBuilder pipeline): the C++
// header llvm/Passes/PassBuilder.h alone costs ~7 s of compile time in every including TU (as much
// as all the ORC headers), the C header nothing.
#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/Cloning.h>

// --- version shims -------------------------------------------------------------------------------
// None are needed for LLVM 19. Each future shim goes here, guarded by LLVM_VERSION_MAJOR, so that
// the .ipp files are written against one API.

#endif  // LLVM_VERSION_MAJOR
#endif  // LOOM_WITH_LLVM

#endif  // LOOM_BACKEND_LLVM_LLVM_HEADERS_HPP
