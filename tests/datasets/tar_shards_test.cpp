// WebDataset tar shards (datasets/images/src/tar_shards.cpp, tar_reader.cpp, index_cache.cpp) on
// shards this test writes: webdataset's shards read back byte for byte, Python tarfile's formats,
// the index cache, each error's message, and a folder against shards written from it in its order.
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

// ---- WebDataset shards ----

// Writes `n` samples {"__key__", "jpg": random bytes, "cls": random int} with webdataset's
// ShardWriter(pattern, maxcount=k); prints [key, hex of the bytes, cls] for each, in order.
const char* const kShardWriterScript = R"(
import json, random, sys, webdataset as wds
pattern, n, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
out = []
with wds.ShardWriter(pattern, maxcount=k, verbose=0) as w:
    for i in range(n):
        data = rng.randbytes(rng.randint(0, 3000))
        key, cls = "s%05d" % i, rng.randint(0, 12)
        w.write({"__key__": key, "jpg": data, "cls": cls})
        out.append([key, data.hex(), cls])
print(json.dumps(out))
)";

void expect_samples(const TarShards& shards, const json& written, const std::vector<std::string>& shard_files,
                    int per_shard) {
  ASSERT_EQ(shards.size(), static_cast<int64_t>(written.size()));
  int64_t max_label = 0;
  for (int64_t i = 0; i < shards.size(); ++i) {
    const auto image = shards.read(i);
    const std::string key = written[i][0];
    EXPECT_EQ(image.bytes, from_hex(written[i][1])) << key;
    EXPECT_EQ(image.label, written[i][2].get<int64_t>()) << key;
    EXPECT_EQ(image.where, shard_files[i / per_shard] + ": member " + key + ".jpg");
    max_label = std::max(max_label, image.label);
  }
  EXPECT_EQ(shards.classes().size(), static_cast<size_t>(max_label + 1));
  EXPECT_EQ(shards.classes().back(), std::to_string(max_label));
}

TEST(TarShards, WebdatasetShardsReadBackAsWritten) {
  PYTHON_OR_SKIP(py, "webdataset");
  TempDir d("shards-webdataset");
  const json train = run_json(py, kShardWriterScript, {d.file("train-%06d.tar"), "23", "5", "7"});
  const json val = run_json(py, kShardWriterScript, {d.file("val-%06d.tar"), "6", "3", "8"});
  std::vector<std::string> train_files;
  for (int s = 0; s < 5; ++s) train_files.push_back(d.file("train-00000" + std::to_string(s) + ".tar"));

  auto shards = train::datasets::open_tar_shards(d.file("train-{000000..000004}.tar"));
  EXPECT_EQ(shards->shards(), train_files);
  for (size_t s = 0; s < 5; ++s) EXPECT_EQ(shards->shard_samples(s), s < 4 ? 5 : 3);
  expect_samples(*shards, train, train_files, 5);
  EXPECT_EQ(shards->name(), "webdataset:" + d.file("train-{000000..000004}.tar"));

  // Several braces, and a folder (all its .tar files, sorted): train's then val's.
  json both = train;
  both.insert(both.end(), val.begin(), val.end());
  auto braces = train::datasets::open_tar_shards(d.file("{train-{000000..000004},val-{000000..000001}}.tar"));
  auto folder = train::datasets::open_tar_shards(d.path());
  for (const auto* s : {braces.get(), folder.get()}) {
    ASSERT_EQ(s->size(), static_cast<int64_t>(both.size()));
    for (int64_t i = 0; i < s->size(); ++i) {
      EXPECT_EQ(s->read(i).bytes, from_hex(both[i][1])) << i;
      EXPECT_EQ(s->label(i), both[i][2].get<int64_t>()) << i;
      EXPECT_EQ(s->member(i), both[i][0].get<std::string>() + ".jpg") << i;
    }
  }
  // Reads from several threads at once (one descriptor per shard, opened by whichever comes first).
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = 0; i < braces->size(); ++i) {
        const int64_t j = (i + 7 * t) % braces->size();
        mismatches[t] += braces->read(j).bytes != from_hex(both[j][1]);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));

  const std::string err = hinted_error([&] { train::datasets::open_tar_shards(d.file("{train,val}-{000000..000004}.tar")); });
  EXPECT_TRUE(has(err, d.file("{train,val}-{000000..000004}.tar") + ": expected the 10 shard files the pattern names, "
                       "found no file " + d.file("val-000002.tar") + " (the first one missing; 7 of 10 exist)")) << err;
  files::make_dirs(d.file("empty"));
  const std::string none = hinted_error([&] { train::datasets::open_tar_shards(d.file("empty")); });
  EXPECT_TRUE(has(none, d.file("empty") + ": expected WebDataset shards (*.tar files) in the folder, found none")) << none;
}

TEST(TarShards, IndexCacheIsReusedAndRebuiltWhenAShardChanges) {
  PYTHON_OR_SKIP(py, "webdataset");
  TempDir d("shards-cache");
  const json written = run_json(py, kShardWriterScript, {d.file("s-%06d.tar"), "12", "4", "9"});
  std::vector<std::string> shard_files;
  for (int s = 0; s < 3; ++s) shard_files.push_back(d.file("s-00000" + std::to_string(s) + ".tar"));
  const std::string pattern = d.file("s-{000000..000002}.tar");
  auto first = train::datasets::open_tar_shards(pattern, d.file("ckpt"));
  EXPECT_EQ(first->cached_shards(), 0);
  EXPECT_EQ(files::list_dir(first->cache_dir()).size(), 3u);
  auto second = train::datasets::open_tar_shards(pattern, d.file("ckpt"));
  EXPECT_EQ(second->cached_shards(), 3) << second->cache_note();
  EXPECT_EQ(second->cache_note(), "3 of 3 shard indexes read from " + d.file("ckpt/tar-index"));
  expect_samples(*second, written, shard_files, 4);

  // Shard 1 rewritten with other samples: its index is made again, the others' are reused.
  const json other = run_json(py, kShardWriterScript, {d.file("t-%06d.tar"), "4", "4", "10"});
  ASSERT_EQ(files::rename(d.file("t-000000.tar"), shard_files[1]), "");
  json expected = written;
  for (int i = 0; i < 4; ++i) expected[4 + i] = other[i];
  auto third = train::datasets::open_tar_shards(pattern, d.file("ckpt"));
  EXPECT_EQ(third->cached_shards(), 2);
  expect_samples(*third, expected, shard_files, 4);
}

// Tars from Python's tarfile in its three formats: a long key in GNU format (an 'L' member), a long
// key and a non-ASCII key in pax format ('x' headers with path=), a long key split into ustar's
// prefix; with a folder member and a __meta__ member that webdataset skips. Prints tarfile's own view
// of each archive's regular members [name, data offset, size], and the samples [key, hex, cls].
const char* const kTarFormatsScript = R"(
import io, json, random, sys, tarfile
root = sys.argv[1]
rng = random.Random(11)
keys = {"gnu": ["d" * 60 + "/" + "k" * 70, "short"],
        "pax": ["p" * 150, "\u00e9t\u00e9/caf\u00e9"],
        "ustar": ["u" * 80 + "/" + "v" * 70, "plain"]}
formats = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}
members, samples = {}, []
for name, fmt in formats.items():
    path = root + "/" + name + ".tar"
    with tarfile.open(path, "w", format=fmt) as t:
        d = tarfile.TarInfo("somedir"); d.type = tarfile.DIRTYPE; t.addfile(d)
        meta = b"{}"; m = tarfile.TarInfo("__meta__/info.json"); m.size = len(meta); t.addfile(m, io.BytesIO(meta))
        for key in keys[name]:
            data, cls = rng.randbytes(rng.randint(1, 2000)), rng.randint(0, 5)
            for ext, value in (("cls", str(cls).encode()), ("jpg", data)):
                ti = tarfile.TarInfo(key + "." + ext); ti.size = len(value); t.addfile(ti, io.BytesIO(value))
            samples.append([key, data.hex(), cls])
    with tarfile.open(path) as t:
        members[name] = [[m.name, m.offset_data, m.size] for m in t.getmembers() if m.isreg()]
print(json.dumps({"members": members, "samples": samples}))
)";

TEST(TarShards, PythonTarfileFormatsLongNamesAndPaxHeaders) {
  PYTHON_OR_SKIP(py, "webdataset");
  TempDir d("shards-formats");
  const json out = run_json(py, kTarFormatsScript, {d.path()});
  for (const std::string name : {"gnu", "pax", "ustar"}) {
    const auto members = train::datasets::list_tar_members(d.file(name + ".tar"));
    const json& expected = out["members"][name];
    ASSERT_EQ(members.size(), expected.size()) << name;
    for (size_t i = 0; i < members.size(); ++i) {
      EXPECT_EQ(members[i].name, expected[i][0].get<std::string>()) << name;
      EXPECT_EQ(members[i].offset, expected[i][1].get<uint64_t>()) << name;
      EXPECT_EQ(members[i].size, expected[i][2].get<uint64_t>()) << name;
    }
  }
  auto shards = train::datasets::open_tar_shards(d.file("{gnu,pax,ustar}.tar"));
  const json& samples = out["samples"];
  ASSERT_EQ(shards->size(), static_cast<int64_t>(samples.size()));
  for (int64_t i = 0; i < shards->size(); ++i) {
    EXPECT_EQ(shards->member(i), samples[i][0].get<std::string>() + ".jpg");
    EXPECT_EQ(shards->read(i).bytes, from_hex(samples[i][1]));
    EXPECT_EQ(shards->label(i), samples[i][2].get<int64_t>());
  }
}

TEST(TarShards, SampleNamesSplitAsWebdatasetSplitsThem) {
  PYTHON_OR_SKIP(py, "webdataset");
  const std::vector<std::string> names = {"a.jpg", "dir/a.b.c", "a/.x", "/.x", ".x", "a.b/.x", "ab/cd/.x", "noext",
                                          "dir.d/noext", "abc.", "a/b/c.JPG", "d.e/f.g"};
  const char* const script = R"(
import json, sys
from webdataset.tariterators import base_plus_ext
print(json.dumps([list(base_plus_ext(n)) for n in sys.argv[1:]]))
)";
  const json expected = run_json(py, script, names);
  for (size_t i = 0; i < names.size(); ++i) {
    std::string key, ext;
    const bool ok = train::datasets::split_sample_name(names[i], key, ext);
    EXPECT_EQ(ok, !expected[i][0].is_null()) << names[i];
    if (ok && !expected[i][0].is_null()) {
      EXPECT_EQ(key, expected[i][0].get<std::string>()) << names[i];
      EXPECT_EQ(ext, expected[i][1].get<std::string>()) << names[i];
    }
  }
}

// One shard per case, written with webdataset's TarWriter (or tarfile for what TarWriter won't write).
const char* const kBadShardsScript = R"(
import io, sys, tarfile, webdataset as wds
root = sys.argv[1]
cases = {"nolabel": [{"__key__": "a", "jpg": b"x", "cls": 1}, {"__key__": "b", "jpg": b"y"}],
         "noimage": [{"__key__": "a", "cls": 2}],
         "textlabel": [{"__key__": "a", "jpg": b"x", "cls": "x1"}],
         "negative": [{"__key__": "a", "jpg": b"x", "cls": -3}],
         "good": [{"__key__": "k%d" % i, "jpg": bytes(700), "cls": i} for i in range(3)]}
for name, samples in cases.items():
    with wds.TarWriter(root + "/" + name + ".tar") as w:
        for s in samples:
            w.write(s)
with tarfile.open(root + "/dup.tar", "w") as t:
    for n in ("a.cls", "a.jpg", "a.JPG"):
        ti = tarfile.TarInfo(n); ti.size = 1; t.addfile(ti, io.BytesIO(b"1"))
)";

std::string shard_error(const std::string& path) {
  return hinted_error([&] { train::datasets::open_tar_shards(path); });
}

TEST(TarShards, BadSamplesAreNamed) {
  PYTHON_OR_SKIP(py, "webdataset");
  TempDir d("shards-bad");
  const auto r = train::test::run_program({py, "-c", kBadShardsScript, d.path()}, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string err = shard_error(d.file("nolabel.tar"));
  EXPECT_TRUE(has(err, d.file("nolabel.tar") + ": sample b (members b.jpg): expected a class member b.cls, found none"))
      << err;
  err = shard_error(d.file("noimage.tar"));
  EXPECT_TRUE(has(err, "sample a (members a.cls): expected an image member a.jpg, .jpeg or .png, found none")) << err;
  err = shard_error(d.file("textlabel.tar"));
  EXPECT_TRUE(has(err, d.file("textlabel.tar") + ": member a.cls: expected the class as a decimal integer, found \"x1\""))
      << err;
  err = shard_error(d.file("negative.tar"));
  EXPECT_TRUE(has(err, "member a.cls: expected a class of 0 or more, found -3")) << err;
  err = shard_error(d.file("dup.tar"));
  EXPECT_TRUE(has(err, "sample a: expected one member per extension, found a.jpg and a.JPG")) << err;
}

// `path` cut to `size` bytes (a copy named `name`).
std::string cut_copy(const std::string& path, const std::string& name, uint64_t size) {
  const std::string out = path.substr(0, path.rfind('/') + 1) + name;
  EXPECT_EQ(files::copy_file(path, out), "");
  EXPECT_EQ(::truncate(out.c_str(), static_cast<off_t>(size)), 0);
  return out;
}

TEST(TarShards, DamagedTarsAreNamed) {
  PYTHON_OR_SKIP(py, "webdataset");
  TempDir d("shards-damaged");
  const auto r = train::test::run_program({py, "-c", kBadShardsScript, d.path()}, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string good = d.file("good.tar");
  const auto members = train::datasets::list_tar_members(good);
  ASSERT_EQ(members.size(), 6u);  // k0.cls k0.jpg k1.cls ...
  const auto& jpg1 = members[3];
  ASSERT_EQ(jpg1.name, "k1.jpg");

  std::string cut = cut_copy(good, "cut-data.tar", jpg1.offset + 100);
  std::string err = shard_error(cut);
  EXPECT_TRUE(has(err, cut + ": member k1.jpg at offset " + std::to_string(jpg1.offset - 512) +
                           ": expected 700 bytes of data, found 100 before the end of the file (truncated?)")) << err;
  cut = cut_copy(good, "cut-header.tar", jpg1.offset - 200);
  err = shard_error(cut);
  EXPECT_TRUE(has(err, cut + ": expected a 512-byte tar header at offset " + std::to_string(jpg1.offset - 512) +
                           " (after member k1.cls), found the file ending at")) << err;
  const auto& last = members.back();
  cut = cut_copy(good, "cut-end.tar", last.offset + 1024);  // 700 bytes padded to 1024: no end block
  err = shard_error(cut);
  EXPECT_TRUE(has(err, "or the end-of-archive block, found the end of the file (truncated?)")) << err;

  // One bit flipped in a header's name: its checksum no longer holds.
  const std::string flipped = d.file("flipped.tar");
  ASSERT_EQ(files::copy_file(good, flipped), "");
  const int fd = ::open(flipped.c_str(), O_RDWR);
  const char k = 'K';
  ASSERT_EQ(::pwrite(fd, &k, 1, static_cast<off_t>(jpg1.offset - 512)), 1);
  ::close(fd);
  err = shard_error(flipped);
  EXPECT_TRUE(has(err, flipped + ": header at offset " + std::to_string(jpg1.offset - 512) +
                           " (after member k1.cls): expected the checksum its header records")) << err;
  EXPECT_TRUE(has(err, "(a bad header checksum)")) << err;
}

// ---- A folder and shards holding the same images ----

// Shards written from an image folder in its order (torchvision's ImageFolder's samples), each
// image under its own extension, with webdataset's ShardWriter.
const char* const kFolderToShardsScript = R"(
import os, sys, webdataset as wds
from torchvision.datasets import ImageFolder
ok = lambda p: p.lower().endswith(('.jpg', '.jpeg', '.png'))
ds = ImageFolder(sys.argv[1], loader=lambda p: p, is_valid_file=ok)
with wds.ShardWriter(sys.argv[2], maxcount=4, verbose=0) as w:
    for i, (path, label) in enumerate(ds.samples):
        with open(path, "rb") as f:
            w.write({"__key__": "%06d" % i, os.path.splitext(path)[1][1:].lower(): f.read(), "cls": label})
)";

TEST(ImageSources, FolderAndShardsFromItListTheSameSamples) {
  PYTHON_OR_SKIP(py, "torchvision, webdataset");
  TempDir d("sources-same");
  std::mt19937 rng(12);
  write_tree(d.file("train"), d.file("outside"), rng);
  files::make_dirs(d.file("shards"));
  const auto r = train::test::run_program(
      {py, "-c", kFolderToShardsScript, d.file("train"), d.file("shards/train-%06d.tar")}, {}, 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto folder = train::datasets::open_image_folder(d.file("train"));
  const int64_t shard_count = (folder->size() + 3) / 4;
  auto shards = train::datasets::open_tar_shards(d.file("shards/train-{000000..00000" +
                                                        std::to_string(shard_count - 1) + "}.tar"));
  ASSERT_EQ(shards->size(), folder->size());
  for (int64_t i = 0; i < folder->size(); ++i) {
    const auto a = folder->read(i), b = shards->read(i);
    EXPECT_EQ(a.bytes, b.bytes) << a.where << " vs " << b.where;
    EXPECT_EQ(a.label, b.label) << a.where << " vs " << b.where;
  }
}

}  // namespace
