#include "model/weights.h"

#include "model/weight_loader.h"

namespace tandem {

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& c, bool pack) {
  ModelWeights w;
  WeightLoader ld(gguf, &w.packed, pack);
  // The embedding table is read a row at a time (packed only when it is also the output).
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, ld.Matrix("token_embd.weight", c.dim, c.vocab_size, false));
  const int64_t embd_bytes = ld.bytes();  // a lookup reads one row, not the table
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, ld.Vector("output_norm.weight", c.dim));
  if (gguf.FindTensor("output.weight")) {
    TANDEM_ASSIGN_OR_RETURN(w.output, ld.Matrix("output.weight", c.dim, c.vocab_size));
  } else {
    w.output = w.token_embd;
    TANDEM_RETURN_IF_ERROR(ld.Pack(&w.output));
    w.tied_output = true;
  }
  TANDEM_RETURN_IF_ERROR(c.arch().LoadLayers(ld, c, &w));
  w.matrix_bytes += ld.bytes() - embd_bytes + (w.tied_output ? embd_bytes : 0);
  ld.PackAll();
  return w;
}

}  // namespace tandem
