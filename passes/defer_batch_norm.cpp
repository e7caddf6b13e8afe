// DeferBatchNorm: running statistics from the whole mini-batch, not from each
// micro-batch (torchgpipe's DeferredBatchNorm, done on the graph).
//
// With M micro-batches, an unchanged batch norm updates running_mean/var M
// times from M small batches. The pass replaces
//   %y = aten::batch_norm(%x, %w, %b, %rm, %rv, %training, %momentum, %eps, %cudnn)
// with an inlined call of kHelper below, whose training branch runs
//   aten::batch_norm(%x, %w, %b, None, None, True, ...)   # same normalisation
// and adds sum(x), sum(x*x), the element count and 1 to new float64 buffers;
// its eval branch is the original call. The stage's commit method turns the
// sums into the whole batch's mean and unbiased variance and applies the
// momentum once (ATen's formula, in double). num_batches_tracked still counts
// every micro-batch in the graph; the commit corrects it to one per step.
// A recompute cannot count twice: the runtime restores a stage's buffers
// after recomputing.

#include "passes/defer_batch_norm.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/jit.h>
#include <torch/script.h>

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

constexpr const char* kHelper = R"JIT(
def gpipe_deferred_batch_norm(input: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                              running_mean: Tensor, running_var: Tensor, training: bool,
                              momentum: float, eps: float, cudnn_enabled: bool, total: Tensor,
                              total_squares: Tensor, count: Tensor, calls: Tensor) -> Tensor:
    if training:
        dims = [0] + [d + 2 for d in range(input.dim() - 2)]
        x = input.detach().double()
        total.add_(x.sum(dims))
        total_squares.add_((x * x).sum(dims))
        count.add_(input.numel() // input.size(1))
        calls.add_(1)
        return torch.batch_norm(input, weight, bias, None, None, True, momentum, eps, cudnn_enabled)
    return torch.batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps,
                            cudnn_enabled)
)JIT";

std::shared_ptr<Graph> HelperGraph() {
  static std::shared_ptr<torch::jit::CompilationUnit> cu = torch::jit::compile(kHelper);
  auto graph = torch::jit::toGraphFunction(cu->get_function("gpipe_deferred_batch_norm")).graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

class BatchNormDeferrer {
 public:
  BatchNormDeferrer(std::shared_ptr<Graph> graph, std::vector<LiftedAttribute>& attributes,
                    size_t num_model_inputs)
      : graph_(std::move(graph)), attributes_(attributes), num_model_inputs_(num_model_inputs) {}

  std::vector<DeferredBatchNorm> Run() {
    std::vector<Node*> batch_norms;
    for (Node* node : graph_->nodes()) {  // top level: a batch norm inside a block is left alone
      if (node->kind() == c10::aten::batch_norm) batch_norms.push_back(node);
    }
    std::vector<DeferredBatchNorm> deferred;
    for (Node* bn : batch_norms) {
      auto running_mean = AttributeIndex(bn->input(3));
      auto running_var = AttributeIndex(bn->input(4));
      if (running_mean < 0 || running_var < 0) continue;  // track_running_stats=False
      auto momentum = torch::jit::constant_as<double>(bn->input(6));
      TORCH_CHECK(momentum, "--deferred-batch-norm: batch norm '", attributes_[running_mean].name,
                  "' has a momentum that is not a constant (momentum=None, the cumulative "
                  "average, is not supported); give the BatchNorm a float momentum");
      deferred.push_back(Rewrite(bn, running_mean, running_var, *momentum));
    }
    return deferred;
  }

 private:
  int64_t AttributeIndex(Value* v) const {
    if (v->node() != graph_->param_node() || v->offset() < num_model_inputs_) return -1;
    auto index = static_cast<int64_t>(v->offset() - num_model_inputs_);
    return attributes_[index].kind == LiftedAttribute::Kind::TrainingFlag ? -1 : index;
  }

  size_t AddBuffer(const std::string& name, at::Tensor value) {
    graph_->addInput(name)->setType(c10::TensorType::get());
    attributes_.push_back({name, LiftedAttribute::Kind::Buffer, c10::IValue(std::move(value))});
    return attributes_.size() - 1;
  }

  DeferredBatchNorm Rewrite(Node* bn, size_t running_mean, size_t running_var, double momentum) {
    const std::string& rm_name = attributes_[running_mean].name;
    std::string prefix = rm_name.substr(0, rm_name.rfind('.'));
    int64_t channels = attributes_[running_mean].value.toTensor().numel();
    auto f64 = at::TensorOptions().dtype(at::kDouble);

    DeferredBatchNorm d;
    d.running_mean = running_mean;
    d.running_var = running_var;
    d.momentum = momentum;
    d.sum = AddBuffer(prefix + ".gpipe_sum", at::zeros({channels}, f64));
    d.sum_squares = AddBuffer(prefix + ".gpipe_sum_squares", at::zeros({channels}, f64));
    d.count = AddBuffer(prefix + ".gpipe_count", at::zeros({1}, f64));
    d.calls = AddBuffer(prefix + ".gpipe_calls", at::zeros({1}, f64));
    for (size_t a = 0; a < attributes_.size(); ++a) {
      if (attributes_[a].name == prefix + ".num_batches_tracked") d.num_batches_tracked = static_cast<int64_t>(a);
    }

    std::vector<Value*> inputs(bn->inputs().begin(), bn->inputs().end());
    for (size_t a : {d.sum, d.sum_squares, d.count, d.calls}) inputs.push_back(graph_->inputs()[num_model_inputs_ + a]);
    Node* before = bn->prev();
    std::vector<Value*> outputs;
    {
      torch::jit::WithInsertPoint guard(bn);
      outputs = torch::jit::insertGraph(*graph_, *HelperGraph(), inputs);
    }
    // The new nodes belong to the batch norm's submodule (partition units).
    for (Node* n = before->next(); n != bn; n = n->next()) n->copyMetadata(bn);
    bn->output()->replaceAllUsesWith(outputs.at(0));
    GRAPH_UPDATE("deferred batch norm ", prefix);
    bn->destroy();
    return d;
  }

  std::shared_ptr<Graph> graph_;
  std::vector<LiftedAttribute>& attributes_;
  size_t num_model_inputs_;
};

}  // namespace

std::vector<DeferredBatchNorm> DeferBatchNorm(std::shared_ptr<torch::jit::Graph>& graph,
                                              std::vector<LiftedAttribute>& attributes,
                                              size_t num_model_inputs) {
  return BatchNormDeferrer(graph, attributes, num_model_inputs).Run();
}

}  // namespace gpipe
