// The dropout keys; see dropout_keys.h.
#include "app/dropout_keys.h"

#include "runtime/error.h"

namespace trainer::app {

namespace {

// Each site's key and the rate it sets: the one list the functions below walk.
struct SiteKey {
  const char* key;
  float nn::DropoutRates::*site;
};
constexpr SiteKey kSites[] = {{"model.embedding_dropout", &nn::DropoutRates::embedding},
                              {"model.attention_dropout", &nn::DropoutRates::attention},
                              {"model.residual_dropout", &nn::DropoutRates::residual}};

}  // namespace

const std::vector<const char*>& dropout_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> out = {"model.dropout"};
    for (const SiteKey& s : kSites) out.push_back(s.key);
    return out;
  }();
  return keys;
}

nn::DropoutRates dropout_rates(const Config& c) {
  nn::DropoutRates r;
  for (const SiteKey& s : kSites) {
    const double p = c.real(s.key);
    USAGE_CHECK(p == -1 || p >= 0, "{} = {}: a probability in [0, 1), or -1 for model.dropout's",
                s.key, p);
    r.*s.site = float(p == -1 ? c.real("model.dropout") : p);
  }
  r.adapter = float(c.real("train.lora.dropout"));
  return r;
}

void inherit_dropout(Config& c, const nn::DropoutRates& rates) {
  // The adapters' rate only where the run has adapters: one that does not continue a source's
  // is refused by them (naming train.lora's keys), not by a rate without adapters.
  if (!c.stated("train.lora.dropout") && c.integer("train.lora.rank") > 0)
    c.set("train.lora.dropout", nn::as_decimal(rates.adapter));
  if (c.stated("model.dropout")) return;
  for (const SiteKey& s : kSites)
    if (!c.stated(s.key)) c.set(s.key, nn::as_decimal(rates.*s.site));
}

}  // namespace trainer::app
