// cuBLASLt loaded on first use (runtime/cuda/cublaslt.h).
#include "runtime/cuda/cublaslt.h"

#include <dlfcn.h>

#include <type_traits>

#include "runtime/error.h"

namespace trainer::cuda {

namespace {

#define TRAINER_STRING(x) TRAINER_STRING_(x)
#define TRAINER_STRING_(x) #x
// The soname of the cuBLASLt this build was compiled against (its major version).
constexpr char kLibrary[] = "libcublasLt.so." TRAINER_STRING(CUBLAS_VER_MAJOR);

CublasLt load() {
  void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  CHECK(lib, "cannot load cuBLASLt ({}), which CUDA matrix products need: {}", kLibrary,
        ::dlerror());
  CublasLt api{};
  auto bind = [&](auto& entry, const char* name) {
    void* f = ::dlsym(lib, name);
    CHECK(f, "{} has no {}: a cuBLASLt older than this build's ({}.{})", kLibrary, name,
          CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(f);
  };
#define TRAINER_BIND(name) bind(api.name, "cublasLt" #name)
  TRAINER_BIND(GetVersion);
  TRAINER_BIND(Create);
  TRAINER_BIND(Destroy);
  TRAINER_BIND(GetStatusString);
  TRAINER_BIND(Matmul);
  TRAINER_BIND(MatmulAlgoGetHeuristic);
  TRAINER_BIND(MatmulDescCreate);
  TRAINER_BIND(MatmulDescDestroy);
  TRAINER_BIND(MatmulDescSetAttribute);
  TRAINER_BIND(MatmulPreferenceCreate);
  TRAINER_BIND(MatmulPreferenceDestroy);
  TRAINER_BIND(MatmulPreferenceSetAttribute);
  TRAINER_BIND(MatrixLayoutCreate);
  TRAINER_BIND(MatrixLayoutDestroy);
#undef TRAINER_BIND
  return api;  // the library stays loaded for the process's life
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt api = load();  // a failed load throws, and the next call tries again
  return api;
}

}  // namespace trainer::cuda
