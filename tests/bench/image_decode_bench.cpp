// image_decode_bench: the image pipeline alone (read, decode, RandomResizedCrop 224, flip,
// normalize: ImageDataset::draw) over a folder of JPEGs on N threads, no loader and no model; one
// JSON line of images/s, per thread and per CPU second. --make writes photo-like JPEGs to run it on.
#include <train/base/error.h>
#include <train/datasets/image.h>
#include <train/datasets/image_dataset.h>
#include <train/datasets/image_transform.h>

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <turbojpeg.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>

namespace fs = std::filesystem;
using train::datasets::EncodedImage;
using train::datasets::Image;

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw train::DataError(path + ": expected a readable file, found none.", "check the folder's permissions.");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The files under a folder, read from disk (the page cache, after the first epoch) at each draw.
class FileSource : public train::datasets::ImageSource {
 public:
  explicit FileSource(const std::string& dir) : dir_(dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png")) files_.push_back(e.path().string());
    }
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) {
      throw train::DataError(dir + ": expected .jpg, .jpeg or .png files (in any subfolder), found none.",
                             "make some with image_decode_bench --make " + dir + " --from <folder of photos>.");
    }
  }
  int64_t size() const override { return int64_t(files_.size()); }
  EncodedImage read(int64_t index) const override { return {read_file(files_[index]), 0, files_[index]}; }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::string name() const override { return "files:" + dir_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
  std::vector<std::string> classes_;
};

// scikit-image's photographs (its folder also holds drawings, textures and test patterns).
bool is_photo(const std::string& stem) {
  for (const char* p : {"astronaut", "chelsea", "coffee", "motorcycle_left", "motorcycle_right", "rocket"}) {
    if (stem == p) return true;
  }
  return false;
}

// Photo-like JPEGs: `count` crops of the photographs in `from` (is_photo; 4:3 boxes at several scales and
// places), resampled to width x height and encoded at `quality` with 4:2:0 chroma, as cameras do.
int make_jpegs(const std::string& out, const std::string& from, int count, int width, int height, int quality) {
  std::vector<Image> photos;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(from)) {
    const std::string ext = e.path().extension().string();
    if ((ext != ".png" && ext != ".jpg") || !is_photo(e.path().stem().string())) continue;
    const auto bytes = read_file(e.path().string());
    photos.push_back(train::datasets::decode_image(bytes.data(), bytes.size(), e.path().string(), 3));
    names.push_back(e.path().stem().string());
  }
  if (photos.empty()) {
    throw train::DataError(from + ": expected scikit-image's photographs (astronaut.png, chelsea.png, ...), found none.",
                           "pass --from .venv/lib/python3.11/site-packages/skimage/data.");
  }
  tjhandle tj = tjInitCompress();
  std::vector<float> px(size_t(width) * height * 3);
  std::vector<uint8_t> rgb(px.size());
  for (int i = 0; i < count; ++i) {
    const Image& p = photos[i % photos.size()];
    train::datasets::SampleRng rng(7, 0, i);
    const double scale = 0.6 + 0.4 * rng.uniform();  // of the largest 4:3 box that fits
    const double bw = std::min(double(p.width), p.height * 4.0 / 3.0) * scale, bh = bw * 3.0 / 4.0;
    const train::datasets::CropBox box{rng.uniform() * (p.height - bh), rng.uniform() * (p.width - bw), bh, bw};
    train::datasets::resample_bilinear(p, box, height, width, px.data());
    for (size_t k = 0; k < px.size(); ++k) rgb[k] = uint8_t(std::clamp(std::lround(px[k]), 0L, 255L));
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    tjCompress2(tj, rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size, TJSAMP_420, quality, 0);
    const fs::path dir = fs::path(out) / names[i % photos.size()];
    fs::create_directories(dir);
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.jpg", i);
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(jpeg), std::streamsize(size));
    tjFree(jpeg);
  }
  tjDestroy(tj);
  std::cout << nlohmann::json{{"made", count}, {"dir", out}, {"photos", names}, {"width", width}, {"height", height},
                              {"quality", quality}}
                   .dump()
            << "\n";
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

struct RunFlags {
  std::string dir;
  int threads = 1;
  int epochs = 3;
  int size = 224;
  bool full_decode = false;
};

// Sums of each sample's floats (every `stride`-th one): the run's fingerprint, the same at any
// thread count. The timed epochs sum a few values a sample, so the sum costs nothing.
std::vector<double> draw_all(train::datasets::ImageDataset& ds, int threads, int64_t epoch, int64_t stride = 1) {
  std::vector<double> sums(ds.size());
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int64_t i = next++; i < ds.size(); i = next++) {
        const at::Tensor x = ds.draw(i, {1, epoch}).input;
        const float* p = x.data_ptr<float>();
        double s = 0;
        for (int64_t k = 0; k < x.numel(); k += stride) s += p[k];
        sums[i] = s;
      }
    });
  }
  for (auto& th : pool) th.join();
  return sums;
}

int run(const RunFlags& f) {
  at::set_num_threads(1);  // as on the loader's threads: each sample on one core, no OpenMP pool spinning
  train::datasets::ImageOptions o;
  o.size = f.size;
  o.reduced_dct = !f.full_decode;
  train::datasets::ImageDataset ds(std::make_shared<FileSource>(f.dir), o);
  // Verify before timing: the first epoch on 1 thread and on N give the same samples.
  const auto one = draw_all(ds, 1, 0);
  if (draw_all(ds, f.threads, 0) != one) {
    std::cerr << "image_decode_bench: the samples on " << f.threads << " threads differ from 1 thread's\n";
    return 1;
  }
  const int64_t reduced_before = ds.reduced_decodes();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  double checksum = 0;
  for (int e = 1; e <= f.epochs; ++e) {
    for (double s : draw_all(ds, f.threads, e, /*stride=*/997)) checksum += s;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const int64_t images = ds.size() * f.epochs;
  std::cout << nlohmann::json{{"bench", "image_decode"}, {"dir", f.dir}, {"files", ds.size()}, {"epochs", f.epochs},
                              {"images", images}, {"threads", f.threads}, {"size", f.size},
                              {"reduced_dct", !f.full_decode}, {"reduced_decodes", ds.reduced_decodes() - reduced_before},
                              {"seconds", wall}, {"images_per_s", images / wall},
                              {"images_per_s_per_thread", images / wall / f.threads}, {"cpu_seconds", cpu},
                              {"images_per_cpu_s", images / cpu}, {"hardware_threads", std::thread::hardware_concurrency()},
                              {"cpu", cpu_model()}, {"checksum", checksum}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"image_decode_bench: ImageDataset's decode + RandomResizedCrop + flip + normalize over a folder of JPEGs"};
  RunFlags f;
  bool make = false;
  std::string from;
  int count = 256, width = 500, height = 375, quality = 90;
  app.add_option("dir", f.dir, "folder of .jpg/.jpeg/.png files (subfolders too)")->required();
  app.add_option("--threads", f.threads, "threads drawing samples")->check(CLI::PositiveNumber);
  app.add_option("--epochs", f.epochs, "timed passes over the files")->check(CLI::PositiveNumber);
  app.add_option("--size", f.size, "output side")->check(CLI::PositiveNumber);
  app.add_flag("--full-decode", f.full_decode, "decode JPEGs whole (no reduced-DCT decode)");
  app.add_flag("--make", make, "instead: write --count JPEGs into DIR/<photo>/, cut from the photos in --from");
  app.add_option("--from", from, "folder of colour photos for --make (e.g. skimage/data)");
  app.add_option("--count", count, "JPEGs --make writes");
  app.add_option("--width", width, "--make's width");
  app.add_option("--height", height, "--make's height");
  app.add_option("--quality", quality, "--make's JPEG quality");
  CLI11_PARSE(app, argc, argv);
  try {
    if (make) return make_jpegs(f.dir, from, count, width, height, quality);
    return run(f);
  } catch (const std::exception& e) {
    std::cerr << "image_decode_bench: " << e.what() << "\n";
    return 1;
  }
}
