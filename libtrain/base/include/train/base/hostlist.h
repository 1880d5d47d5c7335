// SLURM hostlist expressions ("node[01-04,07]", "gpu[1-2]-ib[3-4]", "a,b[1-2]"): expansion to
// host names exactly as `scontrol show hostnames` prints them, and the reverse compression.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace train {

/// Largest number of hosts a single bracket range may name; SLURM refuses bigger ranges too.
constexpr std::size_t kMaxHostlistRange = 64 * 1024;
/// Largest number of hosts a whole expression may expand to (guards against "a[1-9999]b[1-9999]").
constexpr std::size_t kMaxHostlistHosts = 1024 * 1024;

/// Expands a SLURM hostlist expression into host names, in the order `scontrol show hostnames`
/// prints them (duplicates kept).
///
/// Syntax: items separated by commas or whitespace; each item is text with any number of bracket
/// groups `[r1,r2,...]` where each range is `N` or `LO-HI` (decimal, LO <= HI). Numbers are
/// zero-padded to the number of digits written for LO (`n[098-101]` gives n098 ... n101). Several
/// groups in one item expand to their cartesian product (`gpu[1-2]-ib[3-4]`), in SLURM's order: the
/// last group varies fastest, then the first, second, ... (identical to row-major for two groups).
/// Text after the last group is kept as a suffix (`n[1-2]-ib`); SLURM 22.05's scontrol rejects that
/// form, newer hostlist libraries accept it.
///
/// @param expr the expression, e.g. the value of SLURM_JOB_NODELIST.
/// @throws train::ConfigError for an empty expression or item, unbalanced or nested brackets, an
///   empty or non-numeric range, LO > HI, more than kMaxHostlistRange hosts in one range or more
///   than kMaxHostlistHosts in all. The message names the expression and the column of the problem.
std::vector<std::string> hostlist_expand(const std::string& expr);

/// Compresses host names into a hostlist expression, the inverse of hostlist_expand:
/// `hostlist_expand(hostlist_compress(hosts)) == hosts` for every list of valid host names. Order
/// and duplicates are preserved: only neighbouring hosts that share a prefix are merged
/// ({"n1","n2","n3","n5","m1"} gives "n[1-3,5],m1").
/// @throws train::ConfigError when a host name is empty or contains '[', ']', ',' or whitespace.
std::string hostlist_compress(const std::vector<std::string>& hosts);

}  // namespace train
