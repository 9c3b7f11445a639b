// Matching pairs -> union-find clusters -> keep the first of each, or star clusters around kept samples (see
// dedup_cluster.h).
#include "data/dedup/dedup_cluster.h"

#include <algorithm>
#include <functional>
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

const char* dedup_clustering_name(DedupClustering c) {
  return c == DedupClustering::star ? "star" : "transitive";
}

Expected<DedupClustering> parse_dedup_clustering(std::string_view name) {
  if (name == "transitive") return DedupClustering::transitive;
  if (name == "star") return DedupClustering::star;
  return invalid_argument(str("dedup: clustering '", name, "' (expected transitive or star)"));
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

namespace {

struct StarEdge {
  uint32_t later, earlier;
  DupKind kind;
};

constexpr uint32_t kNone = UINT32_MAX;

// One kind of match (exact, image or caption) for star clustering. The indexes report identical values as pairs
// (i, first occurrence) and near values as pairs of first occurrences only, so a record's matches are those of its
// class (records with the value it has: the first occurrence's index names the class) and of the classes next to
// it. A record is within the threshold of every member of its class and of the adjacent classes.
struct StarFamily {
  DupKind kind = DupKind::none;
  std::vector<uint32_t> cls;          // per record: its class
  std::vector<uint32_t> offsets, adj; // CSR: adjacent classes of class c in adj[offsets[c] .. offsets[c + 1])
  std::vector<uint32_t> first_kept;   // per class: its first kept member (kNone: none yet)

  StarFamily(DupKind k, size_t n, const std::vector<StarEdge>& edges,
             const std::function<bool(uint32_t, uint32_t)>& same)
      : kind(k), cls(n), offsets(n + 1, 0), first_kept(n, kNone) {
    for (uint32_t i = 0; i < n; ++i) cls[i] = i;
    std::vector<std::pair<uint32_t, uint32_t>> links;
    for (const StarEdge& e : edges) {
      if (e.kind != k) continue;
      if (same(e.later, e.earlier)) {
        cls[e.later] = cls[e.earlier];
      } else {
        links.push_back({e.later, e.earlier});
        links.push_back({e.earlier, e.later});
      }
    }
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    for (const auto& l : links) ++offsets[l.first + 1];
    for (size_t c = 0; c < n; ++c) offsets[c + 1] += offsets[c];
    adj.reserve(links.size());
    for (const auto& l : links) adj.push_back(l.second);
  }
};

// Star clustering: in record order, a record matching a kept earlier record is dropped and attached to the kept
// record of its strongest such match (the earliest on ties); otherwise it is kept (unless it is a bad image and
// those are dropped: then nothing attaches to it). Sets cluster, and best / matched of the dropped records.
void star_clusters(size_t n, const std::vector<StarEdge>& edges, const std::vector<SampleHashes>& records,
                   const DedupCriteria& criteria, DedupResult& r, std::vector<DupKind>& best) {
  std::vector<StarFamily> families;
  families.emplace_back(DupKind::exact, n, edges, [](uint32_t, uint32_t) { return true; });
  if (criteria.uses_phash())
    families.emplace_back(DupKind::image, n, edges,
                          [&](uint32_t a, uint32_t b) { return records[a].phash == records[b].phash; });
  if (criteria.uses_caption())
    families.emplace_back(DupKind::caption, n, edges,
                          [&](uint32_t a, uint32_t b) { return records[a].minhash == records[b].minhash; });
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t match = kNone;
    for (const StarFamily& f : families) {
      const auto consider = [&](uint32_t c) {
        const uint32_t j = f.first_kept[c];
        if (j == kNone) return;
        if (f.kind > best[i] || (f.kind == best[i] && j < match)) best[i] = f.kind, match = j;
      };
      const uint32_t c = f.cls[i];
      consider(c);
      for (uint32_t k = f.offsets[c]; k < f.offsets[c + 1]; ++k) consider(f.adj[k]);
    }
    r.cluster[i] = match == kNone ? i : match;
    if (match != kNone) {
      r.matched[i] = match;
      continue;
    }
    if (criteria.drop_bad_images && records[i].image == SampleImageState::bad_image) continue;
    for (StarFamily& f : families)
      if (f.first_kept[f.cls[i]] == kNone) f.first_kept[f.cls[i]] = i;
  }
}

}  // namespace

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
  const bool star = criteria.clustering == DedupClustering::star;
  UnionFind uf(star ? 0 : n);
  // Transitive: per record, the strongest pair seen so far and its other end. Star: every pair, decided below.
  std::vector<DupKind> best(n, DupKind::none);
  std::vector<StarEdge> edges;
  auto add_pair = [&](uint32_t later, uint32_t earlier, DupKind kind) {
    if (star) return edges.push_back({later, earlier, kind});
    uf.unite(later, earlier);
    if (kind > best[later]) best[later] = kind, r.matched[later] = earlier;
    if (kind > best[earlier]) best[earlier] = kind, r.matched[earlier] = later;
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

  if (star) {
    star_clusters(n, edges, records, criteria, r, best);
  } else {
    for (uint32_t i = 0; i < n; ++i) r.cluster[i] = uf.find(i);
  }
  std::vector<uint64_t> cluster_size(n, 0);
  for (uint32_t i = 0; i < n; ++i) ++cluster_size[r.cluster[i]];
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
