#include "model/profile.h"

namespace mx {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kEmbed:
      return "embed";
    case Phase::kNorms:
      return "norms";
    case Phase::kQkv:
      return "qkv_proj";
    case Phase::kAttention:
      return "attention";
    case Phase::kOProj:
      return "o_proj";
    case Phase::kDenseMlp:
      return "mlp";
    case Phase::kRouter:
      return "router";
    case Phase::kDispatch:
      return "dispatch+quant";
    case Phase::kGmm1:
      return "gmm1";
    case Phase::kGmm2:
      return "gmm2";
    case Phase::kCombine:
      return "combine";
    case Phase::kLmHead:
      return "lm_head";
    case Phase::kSharedExpert:
      return "shared_expert";
    case Phase::kDnProj:
      return "dn_proj";
    case Phase::kDnConv:
      return "dn_conv";
    case Phase::kDeltaRule:
      return "delta_rule";
    case Phase::kDnNorm:
      return "dn_gated_norm";
    case Phase::kEpSkew:
      return "ep_skew";
    case Phase::kEpExchange:
      return "ep_exchange";
    case Phase::kTpAllReduce:
      return "tp_all_reduce";
    case Phase::kCount:
      break;
  }
  return "?";
}

const char* phase_layer_type(Phase p) {
  switch (p) {
    case Phase::kDenseMlp:
      return "dense";
    case Phase::kRouter:
    case Phase::kDispatch:
    case Phase::kGmm1:
    case Phase::kGmm2:
    case Phase::kCombine:
    case Phase::kSharedExpert:
    case Phase::kEpSkew:
    case Phase::kEpExchange:
      return "moe";
    case Phase::kDnProj:
    case Phase::kDnConv:
    case Phase::kDeltaRule:
    case Phase::kDnNorm:
      return "linear";
    case Phase::kEmbed:
    case Phase::kLmHead:
      return "head";
    default:
      return "all";
  }
}

double ForwardProfile::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

}  // namespace mx
