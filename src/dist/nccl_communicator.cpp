// The NCCL backend of Communicator for CUDA tensors (see communicator.h); built in CUDA builds only.
#include "dist/communicator.h"

namespace vlm::dist {

#ifdef VLM_DIST_NCCL
#else  // built without CUDA

bool built_with_nccl() { return false; }

Expected<std::unique_ptr<Communicator>> make_nccl_communicator(const LaunchInfo&, Device device) {
  return unsupported(str("collectives on ", device.to_string(), " need the NCCL backend, which CUDA builds have "
                         "(cmake --preset cuda); this vlm was built without CUDA"));
}

#endif

}  // namespace vlm::dist
