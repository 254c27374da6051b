// A small ordered map kept as one sorted vector of (key, value) pairs: the std::map subset the
// overlay's bookkeeping uses (find, count, operator[], erase, erase_if, iteration in key
// order). A std::map puts each entry in a heap node of its own, so a lookup in a peer's map of
// 40 members visited about six nodes scattered over the heap; with 100,000 simulated peers
// each is a cache line and a page to fetch. Here the entries of one map are contiguous.
// Iteration order is std::map's (by key), so a scan decides as it did. Iterators are the
// vector's: any insertion or erasure invalidates them.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace rumor {

template <class K, class V>
class FlatMap {
 public:
  using value_type = std::pair<K, V>;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  iterator begin() { return v_.begin(); }
  iterator end() { return v_.end(); }
  const_iterator begin() const { return v_.begin(); }
  const_iterator end() const { return v_.end(); }
  std::size_t size() const { return v_.size(); }
  bool empty() const { return v_.empty(); }

  iterator find(const K& k) { return find_in(v_, k); }
  const_iterator find(const K& k) const { return find_in(v_, k); }
  std::size_t count(const K& k) const { return find(k) != v_.end() ? 1 : 0; }
  V& operator[](const K& k) {
    auto it = place(v_, k);
    if (it == v_.end() || it->first != k) it = v_.insert(it, value_type{k, V{}});
    return it->second;
  }
  std::size_t erase(const K& k) {
    const auto it = find(k);
    if (it == v_.end()) return 0;
    v_.erase(it);
    return 1;
  }
  iterator erase(const_iterator it) { return v_.erase(it); }
  template <class Pred>
  std::size_t erase_if(Pred pred) {
    const auto it = std::remove_if(v_.begin(), v_.end(), [&](const value_type& x) { return pred(x); });
    const auto n = static_cast<std::size_t>(v_.end() - it);
    v_.erase(it, v_.end());
    return n;
  }

 private:
  // The first entry not before k, and the entry with key k (end() if none), for v_ const or not.
  template <class Vec>
  static auto place(Vec& v, const K& k) {
    return std::lower_bound(v.begin(), v.end(), k, [](const value_type& x, const K& key) { return x.first < key; });
  }
  template <class Vec>
  static auto find_in(Vec& v, const K& k) {
    const auto it = place(v, k);
    return it != v.end() && it->first == k ? it : v.end();
  }
  std::vector<value_type> v_;
};

}  // namespace rumor
