// The parallel grid's arithmetic (Note [Parallel grid] in dist/grid.h): where a world rank
// sits, the rank at a place, and what a rank is called in messages. The one place the rank
// formula is written.
#pragma once

#include <string>

namespace trainer::dist {

struct GridPlace {
  int tensor_rank = 0, stage = 0, data_rank = 0;
};

struct GridShape {
  int tensor = 1, pipeline = 1, data = 1;  // the groups' sizes

  int world() const { return tensor * pipeline * data; }
  GridPlace place(int rank) const {
    return {rank % tensor, rank / tensor % pipeline, rank / (tensor * pipeline)};
  }
  int rank(const GridPlace& p) const {
    return (p.data_rank * pipeline + p.stage) * tensor + p.tensor_rank;
  }
  // What rank `rank` is to the model, by the dimensions over 1: "pipeline stage 1, tensor rank
  // 0, data rank 2"; empty on a grid of data ranks alone, where the rank says it all.
  std::string role(int rank) const {
    if (tensor == 1 && pipeline == 1) return {};
    const GridPlace p = place(rank);
    std::string out;
    auto add = [&](const char* what, int v) {
      out += (out.empty() ? "" : ", ") + std::string(what) + " " + std::to_string(v);
    };
    if (pipeline > 1) add("pipeline stage", p.stage);
    if (tensor > 1) add("tensor rank", p.tensor_rank);
    if (data > 1) add("data rank", p.data_rank);
    return out;
  }
};

}  // namespace trainer::dist
