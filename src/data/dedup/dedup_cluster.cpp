// Matching pairs -> union-find clusters -> keep the first of each (see dedup_cluster.h).
#include "data/dedup/dedup_cluster.h"

#include <unordered_map>

namespace vlm {

Status DedupCriteria::validate() const {
  if (!exact && !uses_phash() && !uses_caption())
    return invalid_argument("dedup: no criterion enabled (exact, phash_distance, caption_jaccard)");
  if (phash_distance > 32) return invalid_argument(str("dedup: phash_distance ", phash_distance, " not in [0, 32]"));
  if (caption_jaccard < 0 || caption_jaccard > 1)
    return invalid_argument(str("dedup: caption_jaccard ", caption_jaccard, " not in (0, 1]"));
  if (bucket_cap < 1) return invalid_argument("dedup: bucket_cap must be >= 1");
  return Status();
}

const char* dup_kind_name(DupKind kind) {
  switch (kind) {
    case DupKind::none: return "none";
    case DupKind::caption: return "caption";
    case DupKind::image: return "image";
    case DupKind::exact: return "exact";
    case DupKind::bad_image: return "bad_image";
  }
  return "unknown";
}

DedupResult cluster_duplicates(const std::vector<SampleHashes>& records, const DedupCriteria& criteria) {
  if (Status s = criteria.validate(); !s.ok()) VLM_FAIL(s.message());
  const size_t n = records.size();
  VLM_CHECK(n < UINT32_MAX, "dedup: ", n, " records (at most 2^32 - 2 per job)");
  DedupResult r;
  r.samples = n;
  r.keep.assign(n, 1);
  r.kind.assign(n, DupKind::none);
  r.matched.assign(n, 0);
  r.cluster.resize(n);
  UnionFind uf(n);
  // Per record: the strongest pair seen so far and its other end.
  std::vector<DupKind> best(n, DupKind::none);
  auto add_pair = [&](uint32_t a, uint32_t b, DupKind kind) {
    uf.unite(a, b);
    if (kind > best[a]) best[a] = kind, r.matched[a] = b;
    if (kind > best[b]) best[b] = kind, r.matched[b] = a;
  };

  for (const SampleHashes& h : records) {
    r.bad_images += h.image == SampleImageState::bad_image;
    r.no_image += h.image == SampleImageState::no_image;
    if (criteria.uses_caption()) r.no_caption += !h.has_caption;
  }

  if (criteria.exact) {
    std::unordered_map<ImageContentHash, uint32_t, ImageContentHashHasher> first_of;
    for (uint32_t i = 0; i < n; ++i) {
      if (records[i].image == SampleImageState::no_image) continue;
      auto [it, inserted] = first_of.emplace(records[i].content, i);
      if (!inserted) add_pair(i, it->second, DupKind::exact), ++r.pairs_exact;
    }
  }
  if (criteria.uses_phash()) {
    std::vector<uint64_t> hashes(n);
    std::vector<uint8_t> valid(n);
    for (size_t i = 0; i < n; ++i) {
      hashes[i] = records[i].phash;
      valid[i] = records[i].image == SampleImageState::ok;
    }
    PhashIndexOptions o;
    o.max_distance = criteria.phash_distance;
    o.bucket_cap = criteria.bucket_cap;
    for (const MatchedPair& p : phash_near_pairs(hashes, valid, o, &r.phash_index))
      add_pair(p.later, p.earlier, DupKind::image), ++r.pairs_image;
  }
  if (criteria.uses_caption()) {
    int num_perm = 0;
    for (const SampleHashes& h : records)
      if (h.has_caption) {
        num_perm = static_cast<int>(h.minhash.size());
        break;
      }
    if (num_perm > 0) {
      std::vector<uint32_t> signatures(n * static_cast<size_t>(num_perm), 0);
      std::vector<uint8_t> valid(n);
      for (size_t i = 0; i < n; ++i) {
        const SampleHashes& h = records[i];
        if (!h.has_caption) continue;
        VLM_CHECK(h.minhash.size() == static_cast<size_t>(num_perm), "dedup: record '", h.key, "' has ",
                  h.minhash.size(), " MinHash slots, others ", num_perm);
        std::copy(h.minhash.begin(), h.minhash.end(), signatures.begin() + i * num_perm);
        valid[i] = 1;
      }
      MinHashIndexOptions o;
      o.threshold = criteria.caption_jaccard;
      o.bucket_cap = criteria.bucket_cap;
      for (const MatchedPair& p : minhash_near_pairs(signatures, num_perm, valid, o, &r.caption_index))
        add_pair(p.later, p.earlier, DupKind::caption), ++r.pairs_caption;
    }
  }

  std::vector<uint64_t> cluster_size(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    r.cluster[i] = uf.find(i);
    ++cluster_size[r.cluster[i]];
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (r.cluster[i] != i) {
      r.keep[i] = 0;
      r.kind[i] = best[i];
      switch (best[i]) {
        case DupKind::exact: ++r.dropped_exact; break;
        case DupKind::image: ++r.dropped_image; break;
        default: ++r.dropped_caption; break;
      }
    } else if (criteria.drop_bad_images && records[i].image == SampleImageState::bad_image) {
      r.keep[i] = 0;
      r.kind[i] = DupKind::bad_image;
      r.matched[i] = i;
      ++r.dropped_bad_image;
    }
    r.kept += r.keep[i];
    const uint64_t s = cluster_size[i];
    if (s >= 2) {
      ++r.clusters;
      if (r.cluster_size_histogram.size() <= s) r.cluster_size_histogram.resize(s + 1, 0);
      ++r.cluster_size_histogram[s];
    }
  }
  return r;
}

}  // namespace vlm
