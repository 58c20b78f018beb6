#include "text/grammar.h"

namespace mx {

Result<std::shared_ptr<const Grammar>> GrammarCache::get(
    const std::string& key,
    const std::function<Result<std::shared_ptr<const Grammar>>()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: two requests may compile the same source at once, and the
  // second insert finds the first.
  MX_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> g, compile());
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, g);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

GrammarCache& GrammarCache::shared() {
  static GrammarCache cache(64);
  return cache;
}

}  // namespace mx
