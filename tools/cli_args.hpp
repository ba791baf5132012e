// tools/cli_args.hpp: the `maxtext` program's parsed command line and the commands, each defined in the translation
// unit of its group (so that no unit compiles every reader, tokenizer and template engine at once):
//   maxtext.cpp     usage text and dispatch
//   cli_models.cpp  make_config, open_model, logits, info        (config and weights readers, AnyModel)
//   cli_text.cpp    generate, tokenize, detokenize               (tokenizers, generation, text streaming)
//   cli_chat.cpp    chat, template                               (chat templates: the Jinja engine)
//   cli_compare.cpp compare                                      (reference dumps, captures, reference_check)
//   cli_serve.cpp   serve                                        (the OpenAI-compatible HTTP server: cpp-httplib)
//   cli_vision.cpp  vision                                       (images: libpng, libjpeg; Gemma 3's and Llama 4's towers)
//   cli_audio.cpp   audio                                        (sound: libsndfile, libsoxr; Qwen3-Omni's audio encoder)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {
class AnyModel;
}

/// Usage lines of `maxtext template`, spliced into the usage text (a string literal).
#define MAXTEXT_TEMPLATE_USAGE                                                                                       \
  "  template  --tokenizer PATH --messages FILE.json [--add-generation-prompt on|off] [--tools FILE.json]\n"        \
  "            prints the chat prompt (nothing added). PATH: tokenizer_config.json, tokenizer.json (config beside\n" \
  "            it), a directory holding tokenizer_config.json, or a GGUF; FILE.json: [{\"role\", \"content\"}, ...]\n"

/// Usage lines of `maxtext compare`, spliced into the usage text (a string literal).
#define MAXTEXT_COMPARE_USAGE \
  "  compare   --config CFG [--weights FILE] --reference REF [--map NAMES] --tokens 1,2,3[/...]|tokens.npy\n" \
  "            [--rtol R] [--atol A | --scaled-tol S] [--max-kl-div X] [--top-k K] [--names maxtext|hf] [--json OUT]\n" \
  "            run the model on the tokens, capture every activation REF names (.npz, a directory of .npy, .npy or\n" \
  "            .safetensors; NAMES maps their names to ours: lines `their_name our_name`, `name -` ignores), print\n" \
  "            max abs/rel error and the worst element per tensor in forward order; exit 1 if any tensor fails\n" \
  "  compare   --layer KIND --config CFG --weights FILE [--prefix P] --input x.npy|NAME --reference REF [...]\n" \
  "            the same for one layer run on a given input. KIND: decoder (the config's decoder layer; or the\n" \
  "            decoder_block name, e.g. gpt3), moe (second layer kind, DeepSeek), gpt3_attention, gpt3_layernorm.\n" \
  "            Names are relative to the layer (`out` = its output) unless --prefix P loads P.* from the weights\n" \
  "            and names everything P, P.self_attention, ...; --segment-ids/--positions FILE.npy|NAME optional\n"

namespace maxtext::cli {

struct Args {
  std::string command;
  std::map<std::string, std::string> opt;
  std::map<std::string, std::vector<std::string>> all;  ///< every value of a repeated option, in order
  std::vector<std::string> overrides;

  bool has(const std::string& k) const { return opt.count(k) != 0; }
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? d : it->second;
  }
  long long integer(const std::string& k, long long d) const {
    if (!has(k)) return d;
    try {
      std::size_t pos = 0;
      const long long v = std::stoll(get(k), &pos);
      if (pos == get(k).size()) return v;
    } catch (const std::exception&) {
    }
    MAXTEXT_THROW(ArgumentError, "--", k, ": expected an integer, found '", get(k), "'");
  }
  double number(const std::string& k, double d) const {
    if (!has(k)) return d;
    try {
      std::size_t pos = 0;
      const double v = std::stod(get(k), &pos);
      if (pos == get(k).size()) return v;
    } catch (const std::exception&) {
    }
    MAXTEXT_THROW(ArgumentError, "--", k, ": expected a number, found '", get(k), "'");
  }
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  MAXTEXT_CHECK(argc >= 2, ArgumentError, "missing command");
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      std::string key = s.substr(2), value;
      const auto eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else {
        MAXTEXT_CHECK(i + 1 < argc, ArgumentError, "option --", key, " needs a value");
        value = argv[++i];
      }
      a.opt[key] = value;
      a.all[key].push_back(value);
    } else if (s.find('=') != std::string::npos) {
      a.overrides.push_back(s);
    } else {
      MAXTEXT_THROW(ArgumentError, "unexpected argument '", s, "'");
    }
  }
  return a;
}

/// The Config of --config (a MaxText YAML or a Hugging Face config.json) or, without it, of --weights, with the
/// key=value overrides (cli_models.cpp).
Config make_config(const Args& a);

/// The model the config describes (any compiled block; --weight-type, --threads, --int8-activations), with the
/// weights of --weights or initialised from --seed; without `load`, neither (cli_models.cpp). `int8_option`: the
/// option that gave int8-activations, as the messages name it (a draft model's is --draft-int8-activations).
std::unique_ptr<models::AnyModel> open_model(const Config& cfg, const Args& a, bool load = true,
                                             const char* int8_option = "--int8-activations");

/// The ranks of this run when mpirun started it with more than one (tools/cli_dist.cpp, docs/distributed.md): their
/// communicator, or nullptr when this process runs alone.
comm::Communicator* world();
void set_world(comm::Communicator* c);  ///< join_world's (cli_models.cpp keeps it)
/// Join the ranks an MPI launcher started (nothing when it started one, or none): `generate` and `logits` split the
/// model by the config's mesh keys; any other command is refused under mpirun, and so is a program built without MPI.
/// Ranks other than 0 then write nothing to stdout (their stderr keeps errors only).
void join_world(const std::string& command);
/// Rank 0, or the process running alone: the one that writes outputs.
inline bool output_rank() { return world() == nullptr || world()->rank() == 0; }
/// After an error: print it (naming the rank) and end every rank of the job, which cannot go on without this one.
void fail_world(const std::string& message);
/// At a normal end: leave MPI.
void leave_world();

/// The source tree's configs directory, searched after $MAXTEXT_CONFIG_DIR for models/<model_name>.yml. Defined in
/// maxtext.cpp alone, the one unit compiled with that absolute path: the other units stay free of it, so a fresh
/// clone elsewhere finds their objects in the compiler cache (docs/build.md).
const char* default_config_dir();

/// The pictures of --image for one prompt (cli_vision.cpp; refused where the program has no picture support): the
/// prompt's picture markers expanded to the model's image tokens, the marked positions and the soft tokens that
/// replace them (ForwardOptions::media_mask / media_embeddings).
using PromptImages = models::MediaPrompt;
/// The pictures of --image, read and encoded once by the tower of --weights (a Hugging Face
/// Gemma3ForConditionalGeneration checkpoint; --image-preprocess; the soft tokens also to --image-embeddings-out).
class PromptPictures {
 public:
  virtual ~PromptPictures() = default;
  virtual std::int64_t count() const = 0;
  /// Token ids holding k picture markers (Gemma 3: <start_of_image>), k <= count() (k == count() with `all`):
  /// marker i takes picture i.
  virtual PromptImages expand(const std::vector<std::int32_t>& ids, bool all) const = 0;
  /// With --pan-and-scan on: the crops cut from each --image file, in order (its pictures are each file followed by
  /// its crops); empty without pan-and-scan.
  virtual std::vector<std::size_t> crops() const { return {}; }
};
std::unique_ptr<PromptPictures> open_prompt_pictures(const Args& a, const Config& cfg);
/// Whether the command line gives pictures (--image) or sound (--audio) for the prompt.
inline bool has_media(const Args& a) { return a.all.count("image") != 0 || a.all.count("audio") != 0; }
/// Refuses the options of pictures without --image and those of sound without --audio, by name.
inline void check_media_options(const Args& a) {
  if (a.all.count("image") == 0) {
    for (const char* o : {"image-preprocess", "image-embeddings-out", "pan-and-scan"}) {
      MAXTEXT_CHECK(!a.has(o), ArgumentError, a.command, ": --", o, " needs --image");
    }
  }
  if (a.all.count("audio") == 0) {
    for (const char* o : {"audio-form", "audio-embeddings-out"}) {
      MAXTEXT_CHECK(!a.has(o), ArgumentError, a.command, ": --", o, " needs --audio");
    }
  }
}
/// `pictures` (null without --image) followed by the clips of --audio (a Qwen3-Omni checkpoint's audio encoder, each
/// <|audio_pad|> marker taking the next clip; cli_audio.cpp; refused where the program has no sound support).
/// open_prompt_pictures calls it when --audio is given.
std::unique_ptr<PromptPictures> with_prompt_sounds(const Args& a, const Config& cfg,
                                                   std::unique_ptr<PromptPictures> pictures);
/// `prompt` with one marker per --image: open_prompt_pictures(a, cfg)->expand(prompt, true) (cli_text.cpp).
PromptImages encode_prompt_images(const Args& a, const Config& cfg, const std::vector<std::int32_t>& prompt);
/// The marker a prompt's text gives for each picture (Gemma 3: "<start_of_image>"), which llama.cpp's `<__media__>`
/// is rewritten to; empty where the program has no picture support.
std::string image_marker_text(const Args& a);
/// A picture's file bytes and the name errors give it (serve: the request's field).
struct PictureFile {
  std::string_view bytes;
  std::string_view name;
};
/// A model's vision tower, loaded once, for pictures that come later (serve's requests; cli_vision.cpp).
class PictureTower {
 public:
  virtual ~PictureTower() = default;
  /// The text that opens a picture in a prompt (Gemma 3: "<start_of_image>").
  virtual std::string marker() const = 0;
  /// Decodes and encodes `pictures` (PNG or JPEG) and expands `ids`, which hold one marker per picture, marker i
  /// taking picture i.
  virtual PromptImages expand(const std::vector<std::int32_t>& ids, const std::vector<PictureFile>& pictures) const = 0;
};
/// The tower of --mmproj, or of --weights when that is a Hugging Face Gemma 3 checkpoint with its vision tower;
/// null without either, or with `--mmproj none` (serve).
std::unique_ptr<PictureTower> open_picture_tower(const Args& a, const Config& cfg);
/// `text` with llama.cpp's `<__media__>` markers rewritten to image_marker_text (cli_text.cpp); with `pictures` that
/// have pan-and-scan crops, each marker then replaced by the text that introduces its picture and the picture's crops
/// (with_pan_and_scan). `next`: the --image file the text's first marker takes (a chat's earlier messages took the
/// ones before), advanced past this text's markers when the pictures have pan-and-scan crops (it is read only then).
std::string with_image_markers(const Args& a, std::string text, const PromptPictures* pictures = nullptr,
                               std::size_t* next = nullptr);
/// `text` with its k-th picture marker replaced by the text that introduces a picture with crops[k] pan-and-scan
/// crops (io::gemma3_pan_and_scan_prompt; cli_vision.cpp).
std::string with_pan_and_scan(const Args& a, std::string text, const std::vector<std::size_t>& crops);

int cmd_logits(const Args& a);    // cli_models.cpp
int cmd_info(const Args& a);      // cli_models.cpp
int cmd_generate(const Args& a);  // cli_text.cpp
int cmd_tokenize(const Args& a);  // cli_text.cpp: tokenize and detokenize
int cmd_chat(const Args& a);      // cli_chat.cpp
int cmd_template(const Args& a);  // cli_chat.cpp
int cmd_compare(const Args& a);   // cli_compare.cpp
int cmd_serve(const Args& a);     // cli_serve.cpp
int cmd_vision(const Args& a);    // cli_vision.cpp
int cmd_audio(const Args& a);     // cli_audio.cpp

}  // namespace maxtext::cli
