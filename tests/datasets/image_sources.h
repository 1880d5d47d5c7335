// What the image source tests share (image_folder_test.cpp, tar_shards_test.cpp): the venv's
// Python with the peers' packages, its JSON output, random files, folders dated back, a folder
// tree that exercises torchvision's order.
#pragma once

#include "error_checks.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <functional>
#include <ctime>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace train::test::sources {

namespace files = train::files;
using json = nlohmann::json;

// The venv's Python (test::venv_python's, without its separate torch import) when it imports
// `modules`, else "" with the reason in `why`.
inline std::string python_with(const std::string& modules, std::string& why) {
  const char* given = std::getenv("TRAIN_TEST_PYTHON");
  const std::string py = given != nullptr && *given != '\0' ? given : std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/python";
  if (!files::exists(py)) {
    why = "no venv Python at " + py + " (scripts/setup.sh makes it)";
    return "";
  }
  const auto r = train::test::run_program({py, "-c", "import " + modules}, {}, 120);
  if (r.exit_code != 0) {
    why = "the venv's Python can't import " + modules +
          " (scripts/setup.sh installs webdataset==1.0.2 and torchvision==0.26.0): " + train::test::last_line(r.err);
    return "";
  }
  return py;
}

#define PYTHON_OR_SKIP(py, modules)                      \
  std::string py##_why;                                  \
  const std::string py = python_with(modules, py##_why); \
  if (py.empty()) GTEST_SKIP() << py##_why

// Runs a Python script with arguments; its stdout is JSON.
inline json run_json(const std::string& py, const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv{py, "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = train::test::run_program(argv, {}, 240);
  if (r.exit_code != 0) throw std::runtime_error("python failed: " + r.err);
  return json::parse(r.out);
}

inline std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

inline std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A file of random bytes (random length, 0 allowed), its folders made.
inline void write_random(const std::string& path, std::mt19937& rng) {
  files::make_dirs(path.substr(0, path.rfind('/')));
  std::vector<uint8_t> b(rng() % 400);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  train::test::write_file(path, b);
}

// Every folder under `root` (links followed) dated an hour back, as a data set prepared earlier is:
// the folder list's cache is not written for folders changed just now.
inline void backdate(const std::string& root) {
  struct timespec t[2];
  ::clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= 3600;
  t[1] = t[0];
  ::utimensat(AT_FDCWD, root.c_str(), t, 0);
  for (const std::string& name : files::list_dir(root)) {
    const std::string p = root + "/" + name;
    if (files::is_directory(p)) backdate(p);
  }
}

// A folder whose order exercises torchvision's rules: classes sorted byte-wise ('A' < 'Z z' < 'a' <
// 'a-b' < 'b', a hidden class), nested folders sorted by full path ("sub" < "sub-2" < "sub.d" <
// "sub/deeper"), upper-case extensions, a link to a folder outside, files that are skipped (3 in
// class folders, one at the top).
inline void write_tree(const std::string& root, const std::string& outside, std::mt19937& rng) {
  for (const char* f : {"A/1.jpg", "a/10.jpg", "a/2.jpg", "a/1.jpg", "a/B.PNG", "a/b.png", "a/sub/x.jpeg",
                        "a/sub/deeper/z.JPG", "a/sub-2/y.png", "a/sub.d/w.jpg", "a/sub/.hidden.jpg", "a-b/k.jpg",
                        "b/only.jpg", ".hidden/h.jpg", "Z z/q.jpeg", "a/notes.txt", "a/README", "root.jpg"}) {
    write_random(root + "/" + f, rng);
  }
  write_random(outside + "/o1.jpg", rng);
  write_random(outside + "/o2.txt", rng);
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/b/link").c_str()), 0);
}
inline constexpr int64_t kTreeIgnored = 3;  // a/notes.txt, a/README, outside/o2.txt (through b/link)

// The train::Error `fn` throws, as text (train::test::error_of), checked for a hint.
inline std::string hinted_error(const std::function<void()>& fn) {
  const std::string what = train::test::error_of<train::Error>(fn);
  EXPECT_NE(what.find("Hint:"), std::string::npos) << what;
  return what;
}

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace train::test::sources
