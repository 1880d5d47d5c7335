// --decode gpu's device stage (gpu_records.h): a batch of records decoded by nvJPEG on the GPU
// (batched; the hardware JPEG engines for baseline JPEGs where the card has them, nvJPEG's default
// backend for progressive ones and when the engines refuse), then finished by RecordFinisher
// (record_stage.cpp: crop, resize, flip, normalize), all queued on the loader's side stream.
// libnvjpeg.so is opened at run time. Compiled where CMake found nvjpeg.h (nvjpeg_stage_none.cpp otherwise).
#include "gpu_records.h"

#include "train/base/error.h"
#include "train/base/log.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>

#include <dlfcn.h>
#include <nvjpeg.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace train::datasets::detail {
namespace {

// nvJPEG's functions, from the library opened at run time.
struct NvjpegApi {
  decltype(&nvjpegCreateEx) create_ex = nullptr;
  decltype(&nvjpegDestroy) destroy = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegDecodeBatchedInitialize) batched_init = nullptr;
  decltype(&nvjpegDecodeBatched) batched = nullptr;
  decltype(&nvjpegDecode) decode = nullptr;
  decltype(&nvjpegGetProperty) property = nullptr;
  std::string path;
};

template <class F>
void bind(void* lib, const char* name, F* fn, std::string& missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
}

NvjpegApi open_nvjpeg() {
  std::vector<std::string> names;
#ifdef TRAIN_NVJPEG_LIBRARY
  names.push_back(TRAIN_NVJPEG_LIBRARY);  // the toolkit's, found at configure time
#endif
#ifdef NVJPEG_VER_MAJOR
  names.push_back("libnvjpeg.so." + std::to_string(NVJPEG_VER_MAJOR));
#endif
  names.push_back("libnvjpeg.so");
  NvjpegApi a;
  void* lib = nullptr;
  std::string tried;
  for (const std::string& n : names) {
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      a.path = n;
      break;
    }
    const char* e = dlerror();
    tried += "\n  " + n + ": " + (e != nullptr ? e : "not found");
  }
  if (lib == nullptr) {
    throw ConfigError("--decode gpu: expected nvJPEG's library (libnvjpeg.so, from the CUDA toolkit), found none:" + tried,
                      "load the CUDA toolkit (e.g. module load cuda) or add its lib64 folder to LD_LIBRARY_PATH; or "
                      "use --decode cpu.");
  }
  std::string missing;
  bind(lib, "nvjpegCreateEx", &a.create_ex, missing);
  bind(lib, "nvjpegDestroy", &a.destroy, missing);
  bind(lib, "nvjpegJpegStateCreate", &a.state_create, missing);
  bind(lib, "nvjpegJpegStateDestroy", &a.state_destroy, missing);
  bind(lib, "nvjpegDecodeBatchedInitialize", &a.batched_init, missing);
  bind(lib, "nvjpegDecodeBatched", &a.batched, missing);
  bind(lib, "nvjpegDecode", &a.decode, missing);
  bind(lib, "nvjpegGetProperty", &a.property, missing);
  if (!missing.empty()) {
    throw ConfigError(a.path + ": expected nvJPEG's functions, found none named " + missing + ".",
                      "use the nvJPEG of the CUDA toolkit libtrain was built against (LD_LIBRARY_PATH), or --decode cpu.");
  }
  return a;
}

const NvjpegApi& nvjpeg() {
  static const NvjpegApi api = open_nvjpeg();  // a throw leaves it unset: the next call tries again
  return api;
}

std::string status_text(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    default: return "nvJPEG status " + std::to_string(static_cast<int>(s));
  }
}

void check(nvjpegStatus_t s, const char* call) {
  if (s != NVJPEG_STATUS_SUCCESS) {
    throw ConfigError(std::string("--decode gpu: expected ") + call + " to succeed, found " + status_text(s) + ".",
                      "check the GPU with nvidia-smi, or use --decode cpu.");
  }
}

// One thread's decoding states (nvJPEG's states are not shared between threads), with the batch
// size each was initialized for.
struct States {
  nvjpegJpegState_t hw = nullptr, sw = nullptr, single = nullptr;
  int hw_batch = 0, sw_batch = 0;
};

// The images of one decode call: their bytes and where their pixels go.
struct Group {
  std::vector<int> items;  // positions in the batch
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nvjpegImage_t> images;
};

class NvjpegStage : public DeviceStage {
 public:
  NvjpegStage(const ImageDataset& data, const at::Device& device)
      : data_(data), api_(nvjpeg()), finisher_(data.options()) {
    if (!device.is_cuda()) {
      throw ConfigError("--decode gpu: expected a CUDA device, found " + device.str() + ".",
                        "use --device cuda, or --decode cpu.");
    }
    // The default backend always (first: a throw here leaves nothing to destroy); the hardware
    // engines (A100, H100, ...) where the card has them.
    check(api_.create_ex(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &sw_), "nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT)");
    if (api_.create_ex(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &hw_) != NVJPEG_STATUS_SUCCESS) hw_ = nullptr;
    const ImageOptions& o = data.options();
    int major = 0, minor = 0, patch = 0;
    api_.property(MAJOR_VERSION, &major);
    api_.property(MINOR_VERSION, &minor);
    api_.property(PATCH_LEVEL, &patch);
    log::info("--decode gpu: nvJPEG " + std::to_string(major) + "." + std::to_string(minor) + "." +
              std::to_string(patch) + " (" + api_.path + ") on " + device.str() + ", hardware JPEG engines: " +
              (hw_ != nullptr ? "yes (baseline JPEGs)" : "no (the default backend decodes every JPEG)") +
              "; colour JPEGs of up to " + std::to_string(o.gpu_jpeg_bytes) +
              " bytes decode there, other images on the loader's threads");
  }

  ~NvjpegStage() override {
    for (auto& s : free_) {
      for (nvjpegJpegState_t st : {s->hw, s->sw, s->single}) {
        if (st != nullptr) api_.state_destroy(st);
      }
    }
    if (hw_ != nullptr) api_.destroy(hw_);
    if (sw_ != nullptr) api_.destroy(sw_);
  }

  Batch finish(const Batch& host, const at::Device& device) override {
    const std::vector<RecordHeader> recs = record_headers(host, data_.name());
    int64_t decoded_bytes = 0;
    std::vector<int64_t> offsets(recs.size(), 0);
    for (size_t i = 0; i < recs.size(); ++i) {
      if (recs[i].kind != RecordKind::jpeg) continue;
      offsets[i] = decoded_bytes;
      decoded_bytes += int64_t{recs[i].height} * recs[i].width * 3;
    }
    at::Tensor decoded = at::empty({std::max<int64_t>(decoded_bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(device));
    decode_jpegs(recs, host.inputs.const_data_ptr<uint8_t>(), host.inputs.size(1), decoded, offsets, device);
    return finisher_.finish(host, recs, decoded, offsets, device);
  }

 private:
  std::unique_ptr<States> acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        std::unique_ptr<States> s = std::move(free_.back());
        free_.pop_back();
        return s;
      }
    }
    auto s = std::make_unique<States>();
    if (hw_ != nullptr) check(api_.state_create(hw_, &s->hw), "nvjpegJpegStateCreate (hardware)");
    check(api_.state_create(sw_, &s->sw), "nvjpegJpegStateCreate");
    check(api_.state_create(sw_, &s->single), "nvjpegJpegStateCreate");
    return s;
  }

  void release(std::unique_ptr<States> s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(s));
  }

  // One batched decode of `g` with `handle` and `state` (initialized for its size). Returns nvJPEG's status.
  nvjpegStatus_t decode_batched(nvjpegHandle_t handle, nvjpegJpegState_t state, int* initialized, Group& g,
                                cudaStream_t stream) {
    const int count = static_cast<int>(g.items.size());
    if (*initialized != count) {
      const nvjpegStatus_t s = api_.batched_init(handle, state, count, 1, NVJPEG_OUTPUT_RGBI);
      if (s != NVJPEG_STATUS_SUCCESS) return s;
      *initialized = count;
    }
    return api_.batched(handle, state, g.data.data(), g.lengths.data(), g.images.data(), stream);
  }

  // After a batched decode failed: each image alone, to name the one nvJPEG can't decode.
  void decode_one_by_one(States& st, Group& g, const std::vector<RecordHeader>& recs, cudaStream_t stream) {
    for (size_t k = 0; k < g.items.size(); ++k) {
      const nvjpegStatus_t s = api_.decode(sw_, st.single, g.data[k], g.lengths[k], NVJPEG_OUTPUT_RGBI, &g.images[k], stream);
      if (s != NVJPEG_STATUS_SUCCESS) {
        const RecordHeader& r = recs[static_cast<size_t>(g.items[k])];
        std::string where = data_.name() + " sample " + std::to_string(r.index);
        try {
          where = data_.source().read(r.index).where;
        } catch (const std::exception&) {  // the name is what the source gave, or the index
        }
        throw DataError(where + ": expected a JPEG nvJPEG decodes (" + std::to_string(r.width) + "x" +
                            std::to_string(r.height) + ", " + std::to_string(r.bytes) + " bytes), found " +
                            status_text(s) + ".",
                        "the file may be damaged (libjpeg-turbo names the fault: train --decode cpu), or of a kind "
                        "nvJPEG doesn't take; --bad-samples skip does not apply to --decode gpu's decode.");
      }
    }
  }

  void decode_jpegs(const std::vector<RecordHeader>& recs, const uint8_t* base, int64_t stride, at::Tensor& decoded,
                    const std::vector<int64_t>& offsets, const at::Device& device) {
    Group engines, general;  // the hardware engines' share (baseline JPEGs), the default backend's
    uint8_t* out = decoded.data_ptr<uint8_t>();
    for (size_t i = 0; i < recs.size(); ++i) {
      const RecordHeader& r = recs[i];
      if (r.kind != RecordKind::jpeg) continue;
      Group& g = (r.progressive != 0 || hw_ == nullptr) ? general : engines;
      nvjpegImage_t image{};
      image.channel[0] = out + offsets[i];
      image.pitch[0] = static_cast<size_t>(r.width) * 3;
      g.items.push_back(static_cast<int>(i));
      g.data.push_back(base + static_cast<int64_t>(i) * stride + kRecordHeaderBytes);
      g.lengths.push_back(r.bytes);
      g.images.push_back(image);
    }
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    // This thread's states, back to the pool however the decode ends.
    struct Lease {
      NvjpegStage* stage;
      std::unique_ptr<States> states;
      ~Lease() { stage->release(std::move(states)); }
    } lease{this, acquire()};
    States* st = lease.states.get();
    if (!engines.items.empty() && decode_batched(hw_, st->hw, &st->hw_batch, engines, stream) != NVJPEG_STATUS_SUCCESS) {
      st->hw_batch = 0;  // initialize again next time
      // The engines refused one (e.g. 4:1:1 chroma): the whole group through the default backend.
      for (size_t k = 0; k < engines.items.size(); ++k) {
        general.items.push_back(engines.items[k]);
        general.data.push_back(engines.data[k]);
        general.lengths.push_back(engines.lengths[k]);
        general.images.push_back(engines.images[k]);
      }
    }
    if (!general.items.empty() &&
        decode_batched(sw_, st->sw, &st->sw_batch, general, stream) != NVJPEG_STATUS_SUCCESS) {
      st->sw_batch = 0;  // initialize again next time
      decode_one_by_one(*st, general, recs, stream);  // throws naming the image
    }
  }

  const ImageDataset& data_;
  const NvjpegApi& api_;
  nvjpegHandle_t hw_ = nullptr, sw_ = nullptr;
  RecordFinisher finisher_;
  std::mutex mu_;
  std::vector<std::unique_ptr<States>> free_;
};

}  // namespace

std::shared_ptr<DeviceStage> make_nvjpeg_stage(const ImageDataset& data, const at::Device& device) {
  return std::make_shared<NvjpegStage>(data, device);
}

}  // namespace train::datasets::detail
