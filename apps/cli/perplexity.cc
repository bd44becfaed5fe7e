// `deepinfer perplexity`: scores a text file with a model.
//
// Rule (the training script's, tools/train_default_model/train.py): the text is tokenized whole,
// without special tokens, and cut into windows of --window tokens; each window is scored on its
// own, every token but a window's first predicted from the tokens before it in its window. Prints
// the number of predicted tokens, the mean negative log-likelihood per token (nats) and the
// perplexity exp(mean NLL). Log-softmax in double precision.
#include <cmath>
#include <fstream>
#include <sstream>

#include "apps/cli/args.h"
#include "deepinfer/model.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer_cli {

int run_perplexity(const Args& a, const std::string& default_model_dir) {
  if (Status s = check_known(a, {"--model", "--text-file", "--window", "--numerics", "--kv-cache-dtype"}); !s.is_ok())
    return fail(s);
  if (!a.opts.count("--text-file")) return fail(Status::invalid_argument("perplexity: --text-file is required"));
  long long window = 512;
  if (a.opts.count("--window") && !parse_int(a.opts.at("--window"), 2, 1 << 20, &window))
    return fail(Status::invalid_argument("--window must be an integer >= 2"));
  const std::string dir = a.opts.count("--model") ? a.opts.at("--model") : default_model_dir;
  if (dir.empty()) return fail(Status::invalid_argument("perplexity: no --model given and no default model is installed"));
  if (!a.opts.count("--model")) std::fprintf(stderr, "deepinfer: no --model given; using the default model %s\n", dir.c_str());

  const std::string& path = a.opts.at("--text-file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(Status::not_found("cannot read " + path));
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = deepinfer::Tokenizer::from_file(dir + "/tokenizer.json");
  if (!tok.is_ok()) return fail(tok.status().with_context("perplexity needs the model's tokenizer"));
  auto ids = (*tok)->encode(ss.str(), /*add_special_tokens=*/false);
  if (!ids.is_ok()) return fail(ids.status().with_context(path));
  deepinfer::LoadOptions lo;
  if (a.opts.count("--numerics")) {
    auto n = deepinfer::parse_numerics(a.opts.at("--numerics"));
    if (!n.is_ok()) return fail(n.status());
    lo.numerics = *n;
  }
  if (a.opts.count("--kv-cache-dtype")) lo.kv_cache_dtype = a.opts.at("--kv-cache-dtype");
  auto model = deepinfer::Model::load(dir, lo);
  if (!model.is_ok()) return fail(model.status());
  const int V = (*model)->info().vocab_size;

  double total = 0.0;
  long long count = 0;
  std::vector<float> logits;
  for (size_t s = 0; s < ids->size(); s += static_cast<size_t>(window)) {
    const size_t n = std::min(static_cast<size_t>(window), ids->size() - s);
    if (n < 2) continue;
    auto session = (*model)->new_session();
    const std::span<const int32_t> w(ids->data() + s, n);
    if (Status st = (*model)->forward(*session, w, &logits); !st.is_ok()) return fail(st);
    for (size_t t = 0; t + 1 < n; ++t) {
      const float* row = logits.data() + t * static_cast<size_t>(V);
      double mx = row[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0.0;
      for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      total += -(static_cast<double>(row[w[t + 1]]) - mx - std::log(sum));
      ++count;
    }
  }
  if (count == 0) return fail(Status::invalid_argument(path + ": fewer than 2 tokens, nothing to score"));
  const double nll = total / static_cast<double>(count);
  std::printf("{\"tokens\": %lld, \"windows\": %lld, \"window\": %lld, \"mean_nll\": %.6f, \"perplexity\": %.4f}\n",
              count, static_cast<long long>((ids->size() + window - 1) / window), window, nll, std::exp(nll));
  return 0;
}

}  // namespace deepinfer_cli
