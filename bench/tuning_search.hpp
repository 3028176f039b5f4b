// The tuner's search: for one kernel strategy at one token bucket, coordinate descent over its
// named parameters, starting from the built-in defaults. Each pass tries every listed value of
// one parameter with the others held at the best so far, keeps the fastest candidate that passed
// its reference check, and moves on; passes repeat until one changes nothing (at most
// `max_passes`). Candidates a kernel refuses, or that fail the check, are recorded and skipped.
// `max_candidates` > 0 bounds the candidates measured (refused ones, which cost nothing, are not
// counted): the search stops with the best so far once that many were.
// Measurements are medians of several calls; the machine may be shared, so the winner is timed
// again next to the starting point before it is accepted.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tuning/tuning_database.hpp"

namespace fp4cl::bench {

// One parameter and the values to try.
struct ParamAxis {
  std::string name;
  std::vector<long long> values;
};

struct Trial {
  tuning::Params params;
  bool ok = false;
  bool refused = false;  // the layer refused the candidate before building anything
  double us = 0.0;     // median event time of one call (when ok)
  double bytes = 0.0;  // MoE: the expert weight bytes of the layer it timed (0 where not set)
  std::string note;    // why it was refused or failed
};

// Measures one candidate: returns ok = false with a note when the kernel refuses it or its
// output fails the check.
using Evaluate = std::function<Trial(const tuning::Params&)>;

struct SearchResult {
  Trial best;                  // the accepted candidate (ok = false when nothing worked)
  Trial start;                 // the starting point as last measured
  std::vector<Trial> trials;   // everything tried, in order
};

SearchResult coordinate_descent(const tuning::Params& start, const std::vector<ParamAxis>& axes,
                                const Evaluate& evaluate, int max_passes = 2, int max_candidates = 0);

// "GEMV_LOCAL=1 GEMV_TOKENS=4"
std::string params_text(const tuning::Params& p);

}  // namespace fp4cl::bench
