#pragma once
// SLURM generic resources (gres): the one parser of "NAME[:TYPE][:COUNT],..." strings, in two modes.
// Strict (parse_gres_request) for what a user types after --gres: every item is checked and a bad one
// is an error naming the flag. Tolerant (parse_gres_items) for what SLURM prints in sinfo's GRES
// column and scontrol's Gres/GresUsed fields ("gpu:h100:4(S:0-1)", "gpu:4", "(null)"): what can't be
// read is skipped, since the cluster's own text is no user's mistake.
#include <cstdint>
#include <string>
#include <vector>

namespace train {

/// One item of a gres string: "gpu:a100:4(S:0-1)" is {gpu, a100, 4}; "shard:16" is {shard, "", 16}.
struct GresItem {
  std::string name;   ///< gpu, shard, mps, ...
  std::string type;   ///< a100, "" when untyped
  std::int64_t count = 0;
};

/// The items of a gres string: split at commas outside parentheses (SLURM prints "(S:0-1)" and
/// "(3/8,0/8)" after a count), each without its "(...)" part. "" gives none.
std::vector<std::string> split_gres_items(const std::string& gres);

/// Tolerant reading of a Gres or GresUsed string as sinfo and scontrol print it
/// ("gpu:a100:4(S:0-1),shard:a100:16", "gpu:a100:2(IDX:0-1),shard:a100:3(3/8,0/8)"). "(null)" and ""
/// give none; items without a name are skipped; NAME alone counts 1, NAME:TYPE counts 1, and a
/// count is its leading digits (0 when it has none, e.g. "gpu:a100:x").
std::vector<GresItem> parse_gres_items(const std::string& gres);

/// The sum of the counts of items named `name` (gpu, shard), of any type.
std::int64_t gres_total(const std::vector<GresItem>& items, const std::string& name);

/// The largest count of one item named `name`: what a node offers a job that asks for one type,
/// e.g. 4 for "gpu:a100:4(S:0-1),gpu:v100:2"; 0 when there is none.
std::int64_t gres_largest(const std::vector<GresItem>& items, const std::string& name);

/// GPUs a user's --gres asks for per node.
struct GresRequest {
  std::vector<GresItem> items;  ///< every item, checked
  int gpus = 0;                 ///< the gpu item's count, 0 when none
  int shards = 0;               ///< the shard item's count, 0 when none
  std::string item;             ///< the (last) gpu or shard item as given, e.g. "gpu:a100:2"
};

/// Strict reading of a user's gres request: items NAME[:TYPE][:COUNT] separated by commas; NAME of
/// letters, digits, '_', '-', '/'; COUNT a positive integer below 2^31 (other gres than gpu and shard
/// may end it in K, M, G or T); gpu and shard at most once each. `flag` names where the text came
/// from in errors (--gres).
/// @throws train::ConfigError "FLAG 'TEXT': expected ..., found ..." with a hint.
GresRequest parse_gres_request(const std::string& gres, const std::string& flag = "--gres");

}  // namespace train
