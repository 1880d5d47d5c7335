// Image folders (datasets/images/src/image_folder.cpp, index_cache.cpp) on folders this test writes:
// the order and labels against torchvision's ImageFolder, reads from several threads, the cache,
// each error's message, the split folders.
#include "image_sources.h"
#include "error_checks.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/datasets/image_folder.h"
#include "train/datasets/tar_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <functional>
#include <random>
#include <thread>

namespace {

using namespace train::test::sources;  // NOLINT: the shared helpers of the image source tests
using train::DataError;
using train::datasets::ImageFolder;
using train::datasets::TarShards;
using train::test::TempDir;

const char* const kImageFolderScript = R"(
import json, sys
from torchvision.datasets import ImageFolder
ok = lambda p: p.lower().endswith(('.jpg', '.jpeg', '.png'))
try:
    ds = ImageFolder(sys.argv[1], loader=lambda p: p, is_valid_file=ok)
    print(json.dumps({"classes": ds.classes, "samples": ds.samples}))
except Exception as e:
    print(json.dumps({"error": str(e)}))
)";

TEST(ImageFolder, OrderAndLabelsAreTorchvisions) {
  PYTHON_OR_SKIP(py, "torchvision");
  TempDir d("imagefolder-order");
  std::mt19937 rng(1);
  write_tree(d.file("train"), d.file("outside"), rng);
  const json tv = run_json(py, kImageFolderScript, {d.file("train")});
  ASSERT_FALSE(tv.contains("error")) << tv.dump();
  auto folder = train::datasets::open_image_folder(d.file("train"));
  EXPECT_EQ(folder->classes(), tv["classes"].get<std::vector<std::string>>());
  ASSERT_EQ(folder->size(), static_cast<int64_t>(tv["samples"].size()));
  for (int64_t i = 0; i < folder->size(); ++i) {
    EXPECT_EQ(folder->path(i), tv["samples"][i][0].get<std::string>()) << i;
    EXPECT_EQ(folder->label(i), tv["samples"][i][1].get<int64_t>()) << i;
    const auto image = folder->read(i);
    EXPECT_EQ(image.where, folder->path(i));
    EXPECT_EQ(image.label, folder->label(i));
    EXPECT_EQ(image.bytes, bytes_of(train::test::read_text(folder->path(i)))) << image.where;
  }
  EXPECT_EQ(folder->ignored_files(), kTreeIgnored);
  EXPECT_FALSE(folder->from_cache());
  EXPECT_EQ(folder->cache_file(), "");
  EXPECT_EQ(folder->name(), "imagefolder:" + d.file("train"));
}

TEST(ImageFolder, ReadsFromSeveralThreadsAtOnce) {
  TempDir d("imagefolder-threads");
  std::mt19937 rng(2);
  write_tree(d.file("train"), d.file("outside"), rng);
  auto folder = train::datasets::open_image_folder(d.file("train"));
  std::vector<std::vector<uint8_t>> once;
  for (int64_t i = 0; i < folder->size(); ++i) once.push_back(folder->read(i).bytes);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (int64_t i = 0; i < folder->size(); ++i) mismatches[t] += folder->read(i).bytes != once[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// The list of a folder as opened: paths, labels, sizes.
std::vector<std::string> listing(const ImageFolder& f) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < f.size(); ++i) {
    out.push_back(f.relative_path(i) + " " + std::to_string(f.label(i)) + " " + std::to_string(f.file_size(i)));
  }
  return out;
}

TEST(ImageFolder, CacheIsReusedAndRebuiltWhenAFolderChanges) {
  TempDir d("imagefolder-cache");
  std::mt19937 rng(3);
  write_tree(d.file("train"), d.file("outside"), rng);
  backdate(d.path());
  const std::string cache = d.file("ckpt");
  auto first = train::datasets::open_image_folder(d.file("train"), cache);
  EXPECT_FALSE(first->from_cache());
  EXPECT_TRUE(files::is_regular_file(first->cache_file())) << first->cache_note();
  EXPECT_EQ(first->cache_note(), "written to " + first->cache_file());
  auto second = train::datasets::open_image_folder(d.file("train") + "/", cache);
  EXPECT_TRUE(second->from_cache()) << second->cache_note();
  EXPECT_EQ(listing(*second), listing(*first));
  EXPECT_EQ(second->classes(), first->classes());
  EXPECT_EQ(second->ignored_files(), first->ignored_files());
  EXPECT_EQ(second->read(3).bytes, first->read(3).bytes);

  // A file added deep in a class folder changes only that folder's time.
  write_random(d.file("train/a/sub/deeper/new.jpg"), rng);
  auto third = train::datasets::open_image_folder(d.file("train"), cache);
  EXPECT_FALSE(third->from_cache());
  EXPECT_EQ(third->size(), first->size() + 1);
  EXPECT_NE(third->cache_note().find("not written"), std::string::npos) << third->cache_note();  // changed just now
  backdate(d.path());
  EXPECT_FALSE(train::datasets::open_image_folder(d.file("train"), cache)->from_cache());
  auto fourth = train::datasets::open_image_folder(d.file("train"), cache);
  EXPECT_TRUE(fourth->from_cache());
  EXPECT_EQ(listing(*fourth), listing(*third));

  // A new class folder changes the root's time; a damaged cache file is listed again.
  write_random(d.file("train/c/new.jpg"), rng);
  EXPECT_EQ(train::datasets::open_image_folder(d.file("train"), cache)->classes().back(), "c");
  backdate(d.path());
  train::test::write_file(fourth->cache_file(), {'l', 'i', 'b'});
  auto fifth = train::datasets::open_image_folder(d.file("train"), cache);
  EXPECT_FALSE(fifth->from_cache());
  EXPECT_NE(fifth->cache_note().find("not used: not a list"), std::string::npos) << fifth->cache_note();
  EXPECT_TRUE(train::datasets::open_image_folder(d.file("train"), cache)->from_cache());
}

TEST(ImageFolder, RanksRacingToWriteTheCacheAllGetTheList) {
  TempDir d("imagefolder-race");
  std::mt19937 rng(6);
  write_tree(d.file("train"), d.file("outside"), rng);
  backdate(d.path());
  const auto reference = listing(*train::datasets::open_image_folder(d.file("train")));
  std::vector<std::vector<std::string>> seen(4);
  std::vector<std::thread> ranks;
  for (size_t r = 0; r < seen.size(); ++r) {
    ranks.emplace_back([&, r] { seen[r] = listing(*train::datasets::open_image_folder(d.file("train"), d.file("ckpt"))); });
  }
  for (auto& t : ranks) t.join();
  for (const auto& s : seen) EXPECT_EQ(s, reference);
  EXPECT_EQ(files::list_dir(d.file("ckpt")).size(), 1u);  // one list, no temporary file left
  auto after = train::datasets::open_image_folder(d.file("train"), d.file("ckpt"));
  EXPECT_TRUE(after->from_cache()) << after->cache_note();
  EXPECT_EQ(listing(*after), reference);
}

TEST(ImageFolder, EmptyClassIsRefusedAsTorchvisionRefusesIt) {
  TempDir d("imagefolder-empty");
  std::mt19937 rng(4);
  write_random(d.file("train/full/a.jpg"), rng);
  write_random(d.file("train/empty/notes.txt"), rng);
  write_random(d.file("train/empty2/sub/x.bmp"), rng);
  const std::string err = hinted_error([&] { train::datasets::open_image_folder(d.file("train")); });
  EXPECT_TRUE(has(err, "Found no valid file for the classes empty, empty2")) << err;
  EXPECT_TRUE(has(err, d.file("train"))) << err;
  std::string why;
  const std::string py = python_with("torchvision", why);
  if (py.empty()) return;
  const json tv = run_json(py, kImageFolderScript, {d.file("train")});
  EXPECT_TRUE(has(tv.value("error", ""), "Found no valid file for the classes empty, empty2")) << tv.dump();
}

TEST(ImageFolder, ErrorsNameTheFolderOrFile) {
  TempDir d("imagefolder-errors");
  std::mt19937 rng(5);
  std::string err = hinted_error([&] { train::datasets::open_image_folder(d.file("missing")); });
  EXPECT_TRUE(has(err, d.file("missing") + ": expected a readable folder, found none")) << err;
  write_random(d.file("flat/a.jpg"), rng);
  err = hinted_error([&] { train::datasets::open_image_folder(d.file("flat")); });
  EXPECT_TRUE(has(err, "expected one subfolder per class")) << err;
  EXPECT_TRUE(has(err, "found no folder (1 files)")) << err;

  write_random(d.file("train/cat/1.jpg"), rng);
  write_random(d.file("train/cat/2.jpg"), rng);
  ASSERT_EQ(::symlink("nowhere.jpg", d.file("train/cat/3.jpg").c_str()), 0);
  err = hinted_error([&] { train::datasets::open_image_folder(d.file("train")); });
  EXPECT_TRUE(has(err, d.file("train/cat/3.jpg") + ": expected an image file, found a broken link")) << err;
  files::remove_file(d.file("train/cat/3.jpg"));

  // A file that disappears after the folder was listed, and one rewritten with another size.
  auto folder = train::datasets::open_image_folder(d.file("train"));
  ASSERT_EQ(folder->size(), 2);
  const uint64_t size0 = folder->file_size(0);
  files::remove_file(d.file("train/cat/1.jpg"));
  err = hinted_error([&] { folder->read(0); });
  EXPECT_TRUE(has(err, d.file("train/cat/1.jpg") + ": expected the image file listed (" + std::to_string(size0) +
                           " bytes), found none")) << err;
  train::test::write_file(d.file("train/cat/2.jpg"), std::vector<uint8_t>(folder->file_size(1) + 5, 1));
  err = hinted_error([&] { folder->read(1); });
  EXPECT_TRUE(has(err, "expected " + std::to_string(folder->file_size(1)) + " bytes")) << err;
  EXPECT_TRUE(has(err, "found " + std::to_string(folder->file_size(1) + 5) + " bytes")) << err;
}

TEST(ImageFolder, SplitFolders) {
  using train::datasets::ImageSplit;
  TempDir d("imagefolder-splits");
  files::make_dirs(d.file("a/train"));
  files::make_dirs(d.file("a/val"));
  files::make_dirs(d.file("a/test"));
  files::make_dirs(d.file("b/train"));
  files::make_dirs(d.file("b/test"));
  EXPECT_EQ(train::datasets::find_split_folder(d.file("a"), ImageSplit::train).path, d.file("a/train"));
  EXPECT_EQ(train::datasets::find_split_folder(d.file("a"), ImageSplit::eval).name, "val");
  EXPECT_EQ(train::datasets::find_split_folder(d.file("b"), ImageSplit::eval).path, d.file("b/test"));
  files::make_dirs(d.file("c/training"));
  EXPECT_EQ(train::datasets::find_split_folder(d.file("c"), ImageSplit::eval, false).path, "");
  std::string err = hinted_error([&] { train::datasets::find_split_folder(d.file("c"), ImageSplit::eval); });
  EXPECT_TRUE(has(err, "expected a folder " + d.file("c/val") + " or " + d.file("c/test"))) << err;
  EXPECT_TRUE(has(err, "holds training")) << err;
  err = hinted_error([&] { train::datasets::find_split_folder(d.file("nope"), ImageSplit::train); });
  EXPECT_TRUE(has(err, d.file("nope") + ": expected a dataset folder")) << err;
}

}  // namespace
