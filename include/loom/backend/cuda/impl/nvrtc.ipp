// Bodies of loom/backend/cuda/nvrtc.hpp: NVRTC through dlopen.
//
// Error ids: E901 NVRTC not available, E902 compilation failed (with the log), E903 another NVRTC
// call failed, E904 bad architecture (a user error).
//
// The prototypes below are NVRTC's C API as nvrtc.h (CUDA 11-13) declares it; nvrtcResult is a C
// enum (int-sized, NVRTC_SUCCESS = 0) and nvrtcProgram an opaque pointer. They are stable across
// these versions, which is what lets loom skip nvrtc.h.
#include "loom/backend/cuda/nvrtc.hpp"
#include "loom/error.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <dlfcn.h>
#include <glob.h>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cuda {
namespace detail {

struct nvrtc_program_st;  // NVRTC's `struct _nvrtcProgram`; only pointers to it cross the API
using nvrtcProgram = nvrtc_program_st*;
using nvrtcResult = int;

/// The NVRTC entry points loom calls, looked up once. `error` is empty when all were found.
struct nvrtc_api {
  std::string error;   // why NVRTC is unavailable (every candidate tried); empty when loaded
  std::string loaded;  // which library was loaded, its path and version
  int major = 0, minor = 0;
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*GetNumSupportedArchs)(int*) = nullptr;
  nvrtcResult (*GetSupportedArchs)(int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char*) = nullptr;
  // Since CUDA 11.1; without them compile_to_cubin reports E903.
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
};

/// Looks up `name` in `lib` into `fn`; returns false when the symbol is missing.
template <class Fn>
bool nvrtc_resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

/// Tries the candidates of the file comment of nvrtc.hpp in order and keeps the first library
/// that has every entry point.
LOOM_DECL nvrtc_api load_nvrtc() {
  nvrtc_api api;
  std::vector<std::string> candidates;
  const char* env = std::getenv("LOOM_NVRTC_LIBRARY");
  if (env && *env) {
    candidates.push_back(env);
  } else {
    candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    glob_t found{};
    if (glob("/usr/local/cuda/lib64/libnvrtc.so*", 0, nullptr, &found) == 0) {
      std::vector<std::string> paths(found.gl_pathv, found.gl_pathv + found.gl_pathc);
      // Newest first: "libnvrtc.so.13" sorts after "libnvrtc.so.12" and "libnvrtc.so".
      std::sort(paths.rbegin(), paths.rend());
      candidates.insert(candidates.end(), paths.begin(), paths.end());
    }
    globfree(&found);
  }
  std::string tried;
  for (const std::string& candidate : candidates) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* reason = dlerror();
      const std::string text = reason ? reason : "dlopen failed";
      // dlerror() usually names the file already.
      tried +=
          "\n  " + (text.find(candidate) == std::string::npos ? candidate + ": " + text : text);
      continue;
    }
    const char* missing = nullptr;
    auto need = [&](auto& fn, const char* name) {
      if (!missing && !nvrtc_resolve(lib, name, fn)) missing = name;
    };
    need(api.GetErrorString, "nvrtcGetErrorString");
    need(api.Version, "nvrtcVersion");
    need(api.CreateProgram, "nvrtcCreateProgram");
    need(api.DestroyProgram, "nvrtcDestroyProgram");
    need(api.CompileProgram, "nvrtcCompileProgram");
    need(api.GetPTXSize, "nvrtcGetPTXSize");
    need(api.GetPTX, "nvrtcGetPTX");
    need(api.GetProgramLogSize, "nvrtcGetProgramLogSize");
    need(api.GetProgramLog, "nvrtcGetProgramLog");
    if (missing) {
      tried += "\n  " + candidate + ": loaded, but it has no symbol " + missing + " (not NVRTC?)";
      dlclose(lib);
      continue;
    }
    // Since CUDA 11.2; older libraries simply report no list.
    nvrtc_resolve(lib, "nvrtcGetNumSupportedArchs", api.GetNumSupportedArchs);
    nvrtc_resolve(lib, "nvrtcGetSupportedArchs", api.GetSupportedArchs);
    nvrtc_resolve(lib, "nvrtcGetCUBINSize", api.GetCUBINSize);
    nvrtc_resolve(lib, "nvrtcGetCUBIN", api.GetCUBIN);
    if (api.Version(&api.major, &api.minor) != 0) api.major = api.minor = 0;
    std::string path = candidate;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(api.Version), &info) && info.dli_fname)
      path = info.dli_fname;
    api.loaded = "loaded " + candidate + (path != candidate ? " (" + path + ")" : std::string()) +
                 ", NVRTC " + std::to_string(api.major) + "." + std::to_string(api.minor);
    return api;  // the library stays loaded until the process exits
  }
  api = nvrtc_api{};
  api.error = env && *env ? "LOOM_NVRTC_LIBRARY is set, and the library it names did not load:"
                          : "tried (LOOM_NVRTC_LIBRARY is not set):";
  api.error += tried;
  return api;
}

/// The process's NVRTC, loaded by the first caller (a function-local static: thread-safe).
LOOM_DECL const nvrtc_api& nvrtc() {
  static const nvrtc_api api = load_nvrtc();
  return api;
}

/// NVRTC, or loom::backend_error [loom.cuda.E901] saying how to get it.
LOOM_DECL const nvrtc_api& nvrtc_or_throw() {
  const nvrtc_api& api = nvrtc();
  if (!api.error.empty()) {
    LOOM_BACKEND_FAIL("loom.cuda.E901")
        << "NVRTC (NVIDIA's run-time CUDA compiler) could not be loaded, so loom cannot compile "
           "CUDA kernels; "
        << api.error
        << "\nInstall NVRTC (the CUDA toolkit, NVIDIA's apt package cuda-nvrtc-<major>-<minor>, or "
           "the pip wheel nvidia-cuda-nvrtc), or set LOOM_NVRTC_LIBRARY to the full path of "
           "its libnvrtc.so.<major>.";
  }
  return api;
}

LOOM_DECL std::string nvrtc_result_name(const nvrtc_api& api, nvrtcResult rc) {
  const char* name = api.GetErrorString ? api.GetErrorString(rc) : nullptr;
  return name ? std::string(name) : "NVRTC error " + std::to_string(rc);
}

/// "sm_90", "sm_90a" or "compute_90" -> "compute_90" / "compute_90a"; user error otherwise.
LOOM_DECL std::string virtual_arch(const std::string& arch) {
  std::string rest;
  if (arch.rfind("sm_", 0) == 0)
    rest = arch.substr(3);
  else if (arch.rfind("compute_", 0) == 0)
    rest = arch.substr(8);
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  const bool suffix_ok = digits == rest.size() ||
                         (digits + 1 == rest.size() && (rest.back() == 'a' || rest.back() == 'f'));
  LOOM_USER_CHECK(digits >= 2 && digits <= 3 && suffix_ok, "loom.cuda.E904")
      << "'" << arch
      << "' is not a CUDA architecture: write sm_<major><minor> (\"sm_90\", optionally with the "
         "suffix a or f) or compute_<major><minor>";
  return "compute_" + rest;
}

LOOM_DECL std::vector<int> supported_archs(const nvrtc_api& api) {
  std::vector<int> archs;
  int count = 0;
  if (api.GetNumSupportedArchs && api.GetSupportedArchs && api.GetNumSupportedArchs(&count) == 0 &&
      count > 0) {
    archs.resize(static_cast<std::size_t>(count));
    if (api.GetSupportedArchs(archs.data()) != 0) archs.clear();
  }
  std::sort(archs.begin(), archs.end());
  return archs;
}

/// When NVRTC refused the options and the architecture is not one it knows, the list it knows.
LOOM_DECL std::string arch_hint(nvrtcResult rc, const std::string& target) {
  constexpr nvrtcResult NVRTC_ERROR_INVALID_OPTION = 5;
  if (rc != NVRTC_ERROR_INVALID_OPTION) return {};
  const nvrtc_api& api = nvrtc();
  const std::vector<int> archs = supported_archs(api);
  const int number = std::atoi(target.c_str() + 8);  // after "compute_"
  if (archs.empty() || std::binary_search(archs.begin(), archs.end(), number)) return {};
  std::string hint = "\nNVRTC " + std::to_string(api.major) + "." + std::to_string(api.minor) +
                     " compiles only for";
  for (int arch : archs) hint += " sm_" + std::to_string(arch);
  return hint + " (see nvrtc_arch_for).";
}

/// Owns one nvrtcProgram (STYLE 3.9: an RAII guard, so that a throw cannot leak it).
class nvrtc_program {
 public:
  nvrtc_program(const nvrtc_api& api, const std::string& source, const std::string& name)
      : api_(api) {
    nvrtcResult rc =
        api_.CreateProgram(&program_, source.c_str(), name.c_str(), 0, nullptr, nullptr);
    if (rc != 0) {
      program_ = nullptr;
      LOOM_BACKEND_FAIL("loom.cuda.E903")
          << "nvrtcCreateProgram failed for " << name << ": " << nvrtc_result_name(api_, rc);
    }
  }
  nvrtc_program(const nvrtc_program&) = delete;
  nvrtc_program& operator=(const nvrtc_program&) = delete;
  ~nvrtc_program() {
    if (program_) api_.DestroyProgram(&program_);
  }
  nvrtcProgram get() const { return program_; }

  /// The compilation log ("" when NVRTC has none), without its trailing NUL.
  std::string log() const {
    std::size_t size = 0;
    if (api_.GetProgramLogSize(program_, &size) != 0 || size <= 1) return {};
    std::string text(size, '\0');
    if (api_.GetProgramLog(program_, text.data()) != 0) return {};
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return text;
  }

 private:
  const nvrtc_api& api_;
  nvrtcProgram program_ = nullptr;
};

}  // namespace detail

LOOM_DECL bool nvrtc_available(std::string* why) {
  const detail::nvrtc_api& api = detail::nvrtc();
  if (why) *why = api.error.empty() ? api.loaded : api.error;
  return api.error.empty();
}

LOOM_DECL NvrtcVersion nvrtc_version() {
  const detail::nvrtc_api& api = detail::nvrtc_or_throw();
  return {api.major, api.minor};
}

LOOM_DECL std::vector<int> nvrtc_supported_archs() {
  return detail::supported_archs(detail::nvrtc_or_throw());
}

LOOM_DECL std::string nvrtc_arch_for(int compute_major, int compute_minor) {
  const int wanted = compute_major * 10 + compute_minor;
  const std::vector<int> archs = nvrtc_supported_archs();
  if (archs.empty()) return "sm_" + std::to_string(wanted);  // an NVRTC too old to say
  auto newest = std::upper_bound(archs.begin(), archs.end(), wanted);
  LOOM_USER_CHECK(newest != archs.begin(), "loom.cuda.E904")
      << "NVRTC " << nvrtc_version().major << "." << nvrtc_version().minor
      << " cannot compile for compute capability " << compute_major << "." << compute_minor
      << ": its oldest architecture is sm_" << archs.front()
      << "; use an older CUDA toolkit's NVRTC (LOOM_NVRTC_LIBRARY) for this GPU";
  return "sm_" + std::to_string(*(newest - 1));
}

namespace detail {

/// Compiles `source` with `--gpu-architecture=<gpu_arch>`; returns the PTX, or the CUBIN when
/// `cubin` (then gpu_arch must be a real architecture, sm_XX).
LOOM_DECL std::string nvrtc_compile(const std::string& source, const std::string& gpu_arch,
                                    bool cubin, const std::vector<std::string>& extra_options,
                                    const std::string& program_name) {
  const detail::nvrtc_api& api = detail::nvrtc_or_throw();

  std::vector<std::string> options = {"--gpu-architecture=" + gpu_arch, "--std=c++17",
                                      "-default-device"};
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& option : options) argv.push_back(option.c_str());

  detail::nvrtc_program program(api, source, program_name);
  const detail::nvrtcResult rc =
      api.CompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  // The log first: it is what explains a failure (and NVRTC keeps warnings there on success).
  const std::string log = program.log();
  if (rc != 0) {
    std::string joined;
    for (const std::string& option : options) joined += (joined.empty() ? "" : " ") + option;
    LOOM_BACKEND_FAIL("loom.cuda.E902")
        << "NVRTC could not compile " << program_name << " (" << detail::nvrtc_result_name(api, rc)
        << ")\noptions: " << joined << "\nNVRTC log:\n"
        << (log.empty() ? std::string("(empty)") : log)
        << detail::arch_hint(
               rc, gpu_arch.rfind("sm_", 0) == 0 ? "compute_" + gpu_arch.substr(3) : gpu_arch);
  }

  auto get_size = cubin ? api.GetCUBINSize : api.GetPTXSize;
  auto get = cubin ? api.GetCUBIN : api.GetPTX;
  const char* size_name = cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize";
  const char* get_name = cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX";
  if (!get_size || !get)
    LOOM_BACKEND_FAIL("loom.cuda.E903")
        << "this NVRTC has no " << get_name << " (CUDA 11.1 or newer has it)";
  std::size_t size = 0;
  detail::nvrtcResult size_rc = get_size(program.get(), &size);
  std::string out(size, '\0');
  detail::nvrtcResult get_rc = size_rc == 0 ? get(program.get(), out.data()) : size_rc;
  if (get_rc != 0) {
    LOOM_BACKEND_FAIL("loom.cuda.E903")
        << (size_rc != 0 ? size_name : get_name) << " failed for " << program_name << ": "
        << detail::nvrtc_result_name(api, get_rc);
  }
  if (!cubin)
    while (!out.empty() && out.back() == '\0') out.pop_back();  // the size counts the NUL
  return out;
}

}  // namespace detail

LOOM_DECL std::string compile_to_ptx(const std::string& source, const std::string& arch,
                                     const std::vector<std::string>& extra_options,
                                     const std::string& program_name) {
  return detail::nvrtc_compile(source, detail::virtual_arch(arch), false, extra_options,
                               program_name);
}

LOOM_DECL std::string compile_to_cubin(const std::string& source, const std::string& arch,
                                       const std::vector<std::string>& extra_options,
                                       const std::string& program_name) {
  // virtual_arch validates the name; the real architecture has the same number and suffix.
  const std::string real = "sm_" + detail::virtual_arch(arch).substr(8);
  return detail::nvrtc_compile(source, real, true, extra_options, program_name);
}

}  // namespace cuda
LOOM_END_NAMESPACE
