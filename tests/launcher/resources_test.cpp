// Tests for launcher/src/resources.cpp and `trainctl resources`: Gres and GresUsed strings, nodes
// described by a fake gres.conf setup (GPUs of two types, shards in use) as `scontrol show node -o`
// and sinfo print them, the totals, and the soonest-start pointer from fake `sbatch --test-only`
// answers. The machine has no GPU: tests/slurm/workflow_test.cpp checks the rest on the real cluster.
#include "train/launcher/resources.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_process.h"
#include "test_util.h"

namespace train {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

// gres.conf of the fake cluster: gpu[1-2] have 4 A100s each, shared as 16 shards (4 per GPU);
// v1 has 2 untyped GPUs; cpu1 has none. Jobs hold 2 A100s and 3 shards of gpu1, 4 A100s of gpu2.
const char kNodes[] =
    "NodeName=gpu1 Arch=x86_64 CoresPerSocket=16 CPUAlloc=8 CPUEfctv=64 CPUTot=64 CPULoad=3.10 "
    "AvailableFeatures=a100 ActiveFeatures=a100 Gres=gpu:a100:4(S:0-1),shard:a100:16(S:0-1) NodeAddr=gpu1 "
    "NodeHostName=gpu1 Version=22.05.8 OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian RealMemory=512000 "
    "AllocMem=64000 FreeMem=400000 Sockets=2 Boards=1 State=MIXED ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=gpu,all BootTime=2026-11-01T10:00:00 SlurmdStartTime=2026-11-01T10:01:00 "
    "CfgTRES=cpu=64,mem=500G,billing=64,gres/gpu=4,gres/shard=16 AllocTRES=cpu=8,mem=62.50G,gres/gpu=2,gres/shard=3 "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "GresUsed=gpu:a100:2(IDX:0-1),shard:a100:3(3/4,0/4,0/4,0/4)\n"
    "NodeName=gpu2 CPUAlloc=64 CPUTot=64 Gres=gpu:a100:4(S:0-1),shard:a100:16(S:0-1) RealMemory=512000 AllocMem=512000 "
    "State=ALLOCATED Partitions=gpu,all GresUsed=gpu:a100:4(IDX:0-3),shard:a100:0(0/4,0/4,0/4,0/4)\n"
    "NodeName=v1 CPUAlloc=0 CPUTot=32 Gres=gpu:2 RealMemory=192000 AllocMem=0 State=IDLE Partitions=all "
    "GresUsed=gpu:0\n"
    "NodeName=cpu1 CPUAlloc=0 CPUTot=16 Gres=(null) RealMemory=64000 AllocMem=0 State=DOWN+NOT_RESPONDING "
    "Partitions=all GresUsed=(null) Reason=Not responding [slurm@2026-11-26T07:00:00]\n";

const char kSinfo[] =
    "gpu|up|2|64|512000|gpu:a100:4(S:0-1),shard:a100:16(S:0-1)|2-00:00:00\n"
    "all*|up|1|32|192000|gpu:2|1-00:00:00\n"
    "all*|up|2|64|512000|gpu:a100:4(S:0-1),shard:a100:16(S:0-1)|1-00:00:00\n"
    "all*|up|1|16|64000|(null)|1-00:00:00\n";

TEST(Gres, ParsesItemsTypesAndCounts) {
  const std::vector<GresItem> g = parse_gres_items("gpu:a100:4(S:0-1),shard:a100:16(S:0-1)");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].name, "gpu");
  EXPECT_EQ(g[0].type, "a100");
  EXPECT_EQ(g[0].count, 4);
  EXPECT_EQ(g[1].name, "shard");
  EXPECT_EQ(g[1].count, 16);
  const std::vector<GresItem> used = parse_gres_items("gpu:a100:2(IDX:0-1),shard:a100:3(3/4,0/4,0/4,0/4)");
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].count, 2);
  EXPECT_EQ(used[1].count, 3);
  EXPECT_EQ(parse_gres_items("gpu:2")[0].count, 2);
  EXPECT_EQ(parse_gres_items("gpu:2")[0].type, "");
  EXPECT_EQ(parse_gres_items("gpu")[0].count, 1);
  EXPECT_EQ(parse_gres_items("gpu:tesla")[0].type, "tesla");
  EXPECT_EQ(parse_gres_items("shard:16")[0].count, 16);
  EXPECT_EQ(parse_gres_items("gpu:tesla:0(IDX:N/A)")[0].count, 0);
  EXPECT_TRUE(parse_gres_items("(null)").empty());
  EXPECT_TRUE(parse_gres_items("").empty());
  EXPECT_EQ(gres_total(parse_gres_items("gpu:a100:2,gpu:v100:1,shard:8"), "gpu"), 3);
}

TEST(Nodes, ParsesAFakeGresConfCluster) {
  const std::vector<NodeInfo> nodes = parse_scontrol_nodes(kNodes);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].name, "gpu1");
  EXPECT_EQ(nodes[0].partitions, (std::vector<std::string>{"gpu", "all"}));
  EXPECT_EQ(nodes[0].state, "mixed");
  EXPECT_EQ(nodes[0].cpus, 64);
  EXPECT_EQ(nodes[0].cpus_alloc, 8);
  EXPECT_EQ(nodes[0].memory_mb, 512000);
  EXPECT_EQ(nodes[0].memory_alloc_mb, 64000);
  EXPECT_EQ(gres_total(nodes[0].gres, "gpu"), 4);
  EXPECT_EQ(gres_total(nodes[0].gres_used, "shard"), 3);
  EXPECT_EQ(nodes[3].state, "down+not_responding");
  EXPECT_TRUE(nodes[3].gres.empty());

  const std::vector<GresSummary> sum = summarize_gres(nodes);
  ASSERT_EQ(sum.size(), 3u);
  EXPECT_EQ(sum[0].name, "gpu");
  EXPECT_EQ(sum[0].type, "");
  EXPECT_EQ(sum[0].total, 2);
  EXPECT_EQ(sum[0].used, 0);
  EXPECT_EQ(sum[1].type, "a100");
  EXPECT_EQ(sum[1].total, 8);
  EXPECT_EQ(sum[1].used, 6);
  EXPECT_EQ(sum[1].nodes, 2);
  EXPECT_EQ(sum[2].name, "shard");
  EXPECT_EQ(sum[2].total, 32);
  EXPECT_EQ(sum[2].used, 3);
}

TEST(Resources, RendersPartitionsNodesAndTotals) {
  ClusterResources res;
  res.partitions = parse_sinfo_partitions(kSinfo);
  res.nodes = parse_scontrol_nodes(kNodes);
  const std::string text = render_resources(res);
  EXPECT_TRUE(contains(text, "  gpu        up     2      64         512000 MB    4          16           2-00:00:00\n"))
      << text;
  EXPECT_TRUE(contains(text, "  all*       up     4      64         512000 MB    4          16           1-00:00:00\n"))
      << text;
  EXPECT_TRUE(contains(text, "  gpu1  gpu,all     mixed                8/64              64000/512000 MB     2/4"
                             "               3/16                gpu:a100:4,shard:a100:16\n"))
      << text;
  EXPECT_TRUE(contains(text, "  cpu1  all         down+not_responding  0/16              0/64000 MB          -  "))
      << text;
  EXPECT_TRUE(contains(text, "  gpu    a100  8      6       2     2\n")) << text;
  EXPECT_TRUE(contains(text, "  shard  a100  32     3       29    2\n")) << text;
  const nlohmann::json j = nlohmann::json::parse(render_resources_json(res));
  EXPECT_EQ(j["partitions"][0]["name"], "gpu");
  EXPECT_EQ(j["partitions"][0]["max_time_seconds"], 172800);
  EXPECT_EQ(j["nodes"][0]["gres_used"][1]["count"], 3);
  EXPECT_EQ(j["gres"][2]["free"], 29);

  ClusterResources cpu_only;
  cpu_only.partitions = parse_sinfo_partitions("debug*|up|2|2|2000|(null)|infinite\n");
  EXPECT_TRUE(contains(render_resources(cpu_only), "none: no node has gres gpu or shard")) << render_resources(cpu_only);
}

TEST(Resources, TrainctlPointsOutTheSoonestPartition) {
  test::TempDir dir("resources-fake");
  write_text(dir.file("sinfo"), std::string("#!/bin/sh\ncat <<'EOF'\n") + kSinfo + "EOF\n", 0755);
  write_text(dir.file("scontrol"), std::string("#!/bin/sh\ncat <<'EOF'\n") + kNodes + "EOF\n", 0755);
  // sbatch --test-only: the gpu partition can start the job later than all; nothing else is asked.
  write_text(dir.file("sbatch"),
             "#!/bin/sh\n"
             "p=$(grep -o 'partition=[a-z]*' | cut -d= -f2)\n"
             "case \"$p\" in\n"
             "  gpu) echo \"sbatch: Job 5 to start at 2026-11-26T09:00:00 using 8 processors on nodes gpu1 in partition gpu\" >&2 ;;\n"
             "  all) echo \"sbatch: Job 6 to start at 2026-11-26T08:00:00 using 8 processors on nodes gpu2 in partition all\" >&2 ;;\n"
             "  *) echo \"sbatch: error: invalid partition\" >&2; exit 1 ;;\n"
             "esac\n",
             0755);
  test::Env env = test::hermetic_env();
  env["PATH"] = dir.path() + ":/usr/bin:/bin";
  const auto p = test::run_process({trainctl(), "resources", "--gres", "gpu:2", "--cpus-per-task", "4", "--time", "1:00:00"},
                                   env, 30);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "Where a job of 1 node(s) x 2 task(s) x 4 CPUs, --gres gpu:2, time 1:00:00 could start"))
      << p->out();
  EXPECT_TRUE(contains(p->out(), "  gpu        2026-11-26T09:00:00  gpu1   \n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "  all        2026-11-26T08:00:00  gpu2   soonest\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "Soonest: partition all at 2026-11-26T08:00:00 on gpu2.\n")) << p->out();
  // A shape no partition can hold is named as such, partition by partition.
  const auto big = test::run_process({trainctl(), "resources", "--gres", "gpu:8"}, env, 30);
  ASSERT_EQ(big->exit_code(), 0) << big->err();
  EXPECT_TRUE(contains(big->out(), "does not fit: --gres gpu:8: expected at most the 4 GPUs of a node in partition gpu"))
      << big->out();
  EXPECT_TRUE(contains(big->out(), "No partition can run this shape now. Hint: ")) << big->out();
  // Unknown partition.
  const auto none = test::run_process({trainctl(), "resources", "--partition", "nope"}, env, 30);
  EXPECT_EQ(none->exit_code(), 1);
  EXPECT_TRUE(contains(none->err(), "--partition nope: expected one of this cluster's partitions")) << none->err();
  // No SLURM at all.
  env["PATH"] = "/nonexistent";
  const auto no_slurm = test::run_process({trainctl(), "resources"}, env, 30);
  EXPECT_EQ(no_slurm->exit_code(), 1);
  EXPECT_TRUE(contains(no_slurm->err(), "sinfo: expected SLURM's sinfo on PATH, found none. Hint: ")) << no_slurm->err();
}

}  // namespace
}  // namespace train
