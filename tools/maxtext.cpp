// tools/maxtext.cpp: the `maxtext` command-line program: usage and dispatch. The commands live in the units named in
// cli_args.hpp; the models are compiled per decoder block in maxtext_blocks (tools/blocks/).
#include <exception>
#include <iostream>
#include <string>

#include "cli_args.hpp"
#include "cli_options.hpp"

namespace {

const char* kUsage = R"(usage: maxtext <command> [options] [key=value ...]

commands:
  logits    --config CFG [--weights FILE] --tokens 1,2,3[/4,5,6] [--incremental N] --out logits.npy
            [--mtp K [--mtp-hidden raw|normed]]: MTP layer K's logits instead (row t predicts token t + K + 1;
            mtp_num_layers >= K); normed: the layers read the hidden state through the final norm, as llama.cpp's
  generate  --config CFG [--weights FILE] --tokens 1,2,3[/...] --max-new-tokens N
            [--temperature T] [--top-k K] [--top-p P] [--seed S]
  generate  --weights FILE [--tokenizer FILE] --prompt "text" [--max-new-tokens N] [--stop STRING ...] [...]:
            streams the text
            [--spec lookup|draft|mtp [--draft FILE] [--draft-max K] [--draft-int8-activations on|off|auto]
            [--mtp-hidden raw|normed]]: greedy speculative decoding, K drafted tokens (default 4) checked per pass,
            from prompt lookup, a draft model sharing the tokenizer (auto, the default: its products take 8-bit
            activations where its weights allow; drafts never change the output), or the model's MTP layers (one
            draft per layer); the same tokens
            [--grammar GBNF | --grammar-file FILE | --json-schema JSON | --json-schema-file FILE]: the text follows
            the grammar (llama.cpp's GBNF) or the JSON Schema
  generate|logits|chat ... --image FILE [--image FILE ...] [--mmproj MMPROJ.gguf]
            [--image-preprocess maxtext|hf|llamacpp] [--image-embeddings-out F]: pictures merged into the prompt (a Gemma 3,
            Llama 4 or Gemma 4 checkpoint with its vision tower, or a text model with llama.cpp's mmproj file of one):
            each <start_of_image> (Llama 4, Gemma 4: <|image|>; or llama.cpp's <__media__>) of the prompt, --tokens or
            the chat's messages takes the next picture. docs/vision.md
            generate --prompt ... | chat ... [--pan-and-scan on|off]: an elongated picture also as 2-4 crops, introduced in the
            prompt as Hugging Face's Gemma 3 processor does (off by default)
  chat      --weights FILE [--tokenizer FILE] [--system TEXT] [--max-new-tokens N] [--ctx-size N] [sampling]
            [--spec lookup|draft|mtp [--draft FILE] [--draft-max K] [--draft-int8-activations on|off|auto]
            [--mtp-hidden raw|normed]] [--session FILE]:
            a conversation, one user message per line of stdin until EOF; the KV cache is kept between turns;
            --session restores the conversation from FILE when it exists and saves it there after every turn
  serve     --weights FILE [--tokenizer FILE] [--host 127.0.0.1] [--port 8080] [--parallel N] [--queue Q]
            [--ctx-size N] [--max-new-tokens N] [--alias NAME] [--api-key KEY | --api-key-file FILE]
            [--max-body BYTES] [--mmproj FILE|none] [--image-preprocess maxtext|hf|llamacpp]
            [--batch-rows R] [--prefill-chunk T] [--prefill-rows P]:
            an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models, /health);
            N conversations at once, Q more waiting (then 503), their decode steps R (8) to a forward pass,
            prompts prefilled T (512; 0: whole) tokens a pass, up to P (1) prompts of a round in one pass
            (above 1: within f32 rounding of each alone); the key also from $MAXTEXT_API_KEY; pictures
            (image_url data URLs) through --mmproj or a Gemma 3 / Llama 4 / Gemma 4 checkpoint's own tower (none: text
            only). docs/server.md
  tokenize  (--weights FILE | --tokenizer PATH) (--text "text" | --text-file FILE) [--add-special on|off]:
            prints the ids comma-separated (on, the default: with the special tokens / BOS the tokenizer adds)
  detokenize (--weights FILE | --tokenizer PATH) --ids 1,2,3 [--skip-special on|off]: writes the text to stdout
  generate|logits|chat ... --audio FILE [--audio FILE ...] [--audio-form maxtext|hf] [--audio-embeddings-out F]:
            sound (WAV, FLAC, Ogg, MP3, ...; resampled to 16 kHz) merged into the prompt of a Qwen3-Omni checkpoint
            (its audio encoder and thinker): each <|audio_start|><|audio_pad|><|audio_end|> (or llama.cpp's <__media__>
            when no --image is given) takes the next clip, at text positions; with --image the pictures are expanded
            first. docs/audio.md
  info      --config CFG [--weights FILE]
  vision    (--weights DIR | --mmproj MMPROJ.gguf) --image FILE [--image FILE ...]
            [--image-preprocess maxtext|hf|llamacpp] [--pan-and-scan on|off] [--out tokens.npy]: pictures (PNG, JPEG) through Gemma 3's vision tower (a Hugging Face
            Gemma3ForConditionalGeneration, or llama.cpp's mmproj file): the soft tokens [n, 256, emb_dim] the
            decoder reads (with pan-and-scan each picture's crops after it); or a Llama4ForConditionalGeneration's
            vision model (or its mmproj file): [tiles, 144, emb_dim], each picture's tiles and its global tile; or a
            Gemma4ForConditionalGeneration's vision encoder (or its mmproj file): [soft tokens of all pictures,
            emb_dim], 280 a picture (--image-preprocess hf: its own aspect ratio, at most 280); or a Qwen3.5 / Qwen3-VL
            / Qwen3-Omni checkpoint's vision encoder: its merged tokens. docs/vision.md
  audio     --weights DIR --audio FILE [--audio FILE ...] [--audio-form maxtext|hf] [--out tokens.npy]
            [--features-out features.npy]: sound through a Qwen3-Omni checkpoint's audio encoder: log-mel features
            (MaxText's processor: padded to whole seconds, 13 tokens a second; hf: Hugging Face's) and the soft tokens
            [tokens of all clips, output_dim]. docs/audio.md
)" MAXTEXT_TEMPLATE_USAGE MAXTEXT_COMPARE_USAGE R"(
common options:
  --config FILE      MaxText YAML (a model file such as configs/models/gpt3-52k.yml) or a Hugging Face config.json;
                     key=value overrides follow
  --weights FILE     MaxText safetensors, Hugging Face safetensors (file, index or directory, config.json beside),
                     GGUF (.gguf) or a llama2.c checkpoint (.bin); without it the model is initialised from --seed.
                     GGUF, llama2.c and Hugging Face weights carry their config: --config is then optional
  --tokenizer FILE   tokenizer for --prompt / tokenize: Hugging Face tokenizer.json (or a directory holding one),
                     .gguf, llama2.c tokenizer.bin, SentencePiece .model (default: the GGUF's own, or tokenizer.json /
                     tokenizer.model / tokenizer.bin / tok<vocab>.bin beside the weights)
  --weight-type T    store weights as float32, bfloat16, float16, q8_0 or ggml (each matrix in its GGUF type,
                     Q4_K, Q6_K, Q4_0, F16, ... read where they lie in the file; float32 activations).
                     Default: ggml for a GGUF file (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, olmo2),
                     else the file's own type when every matrix of --weights is F16, BF16 or Q8_0, else the
                     config's dtype; float32 widens
  --threads N        CPU threads (default: all cores)
  --int8-activations on|off|auto
                     with Q8_0 or ggml weights: quantise activations to 8 bits per 32-block and use integer dot
                     products (llama.cpp's Q8_0 arithmetic; faster, ~1% rms logit error). Default off: exact;
                     auto: on where the weights are Q8_0 or a GGUF file's blocks
  --kv-type T        KV-cache element type: the activations' (default, as MaxText) or float16 (keys and values
                     rounded to fp16 as they are written: llama.cpp's default cache type, half the cache's memory
                     and reads); float16 applies to a GGUF file's matrices (weight type ggml)
  --seed S           seed for initialisation and sampling (default: init_weights_seed)

sampling (generate, chat; applied in this order, see docs/generation.md):
  --logit-bias ID=B[,ID=B]   add B to token ID's logit (B may be -inf to ban it)
  --repeat-penalty R         divide positive / multiply negative logits of tokens in the prompt and output (1: off)
  --frequency-penalty F      subtract F per earlier occurrence in the output (0: off)
  --presence-penalty P       subtract P from tokens already in the output (0: off)
  --temperature T            0 (default): greedy
  --top-k K, --top-p P, --min-p M
  --stop STRING              stop when the text contains STRING (repeatable; \n, \t, \\ are escapes); the text
                             ends before it. Text generation also stops at the end-of-sequence ids of the tokenizer
                             and of config.json / generation_config.json / GGUF metadata
)";

}  // namespace

const char* maxtext::cli::default_config_dir() { return MAXTEXT_CLI_CONFIG_DIR; }

#if defined(MAXTEXT_CLI_NO_COMPARE)
// Configured with -DMAXTEXT_CLI_COMPARE=OFF (the main job, scripts/run-example.sh): cli_compare.cpp is not compiled.
int maxtext::cli::cmd_compare(const Args&) {
  MAXTEXT_THROW(UnsupportedError, "compare is not compiled into this program (configure with -DMAXTEXT_CLI_COMPARE=ON, "
                                  "as scripts/test.sh does)");
}
#endif
#if defined(MAXTEXT_CLI_NO_SERVE)
// Configured without cpp-httplib (or with -DMAXTEXT_CLI_SERVE=OFF): cli_serve.cpp is not compiled.
int maxtext::cli::cmd_serve(const Args&) {
  MAXTEXT_THROW(UnsupportedError, "serve is not compiled into this program (install libcpp-httplib-dev, as "
                                  "scripts/setup.sh does, and configure with -DMAXTEXT_CLI_SERVE=ON)");
}
#endif
#if defined(MAXTEXT_CLI_NO_MPI)
// Built without MPI (cli_dist.cpp): alone, nothing to join; under an MPI launcher, refused by name.
void maxtext::cli::join_world(const std::string&) {
  const int n = comm::launched_ranks();
  MAXTEXT_CHECK(n <= 1, UnsupportedError, "an MPI launcher started ", n, " ranks, but this maxtext was built without "
                "MPI (apt-get install libopenmpi-dev openmpi-bin, then configure again: docs/distributed.md)");
}
void maxtext::cli::fail_world(const std::string& message) { std::cerr << "maxtext: error: " << message << "\n"; }
void maxtext::cli::leave_world() {}
#endif
#if defined(MAXTEXT_CLI_NO_AUDIO)
// Configured without libsndfile / libsoxr (or with -DMAXTEXT_CLI_AUDIO=OFF): cli_audio.cpp is not compiled.
int maxtext::cli::cmd_audio(const Args&) {
  MAXTEXT_THROW(UnsupportedError, "audio is not compiled into this program (install libsndfile1-dev and libsoxr-dev, "
                                  "as scripts/setup.sh does, and configure with -DMAXTEXT_CLI_AUDIO=ON)");
}
std::unique_ptr<maxtext::cli::PromptPictures> maxtext::cli::with_prompt_sounds(const Args& a, const Config&,
                                                                             std::unique_ptr<PromptPictures>) {
  MAXTEXT_THROW(UnsupportedError, a.command, " --audio: sound is not compiled into this program (install "
                "libsndfile1-dev and libsoxr-dev, as scripts/setup.sh does, and configure with -DMAXTEXT_CLI_AUDIO=ON)");
}
#endif
#if defined(MAXTEXT_CLI_NO_VISION)
// Configured without libpng / libjpeg (or with -DMAXTEXT_CLI_VISION=OFF): cli_vision.cpp is not compiled.
int maxtext::cli::cmd_vision(const Args&) {
  MAXTEXT_THROW(UnsupportedError, "vision is not compiled into this program (install libpng-dev and "
                                  "libjpeg62-turbo-dev, as scripts/setup.sh does, and configure with "
                                  "-DMAXTEXT_CLI_VISION=ON)");
}
std::unique_ptr<maxtext::cli::PromptPictures> maxtext::cli::open_prompt_pictures(const Args& a, const Config& cfg) {
  if (a.all.count("image") == 0 && a.all.count("audio") != 0) return with_prompt_sounds(a, cfg, nullptr);
  MAXTEXT_THROW(UnsupportedError, a.command, " --image: pictures are not compiled into this program (install "
                "libpng-dev and libjpeg62-turbo-dev, as scripts/setup.sh does, and configure with -DMAXTEXT_CLI_VISION=ON)");
}
std::string maxtext::cli::image_marker_text(const Args& a) {
  return a.all.count("image") == 0 && a.all.count("audio") != 0 ? "<|audio_start|><|audio_pad|><|audio_end|>" : "";
}
std::string maxtext::cli::with_pan_and_scan(const Args&, std::string text, const std::vector<std::size_t>&) {
  return text;
}
std::unique_ptr<maxtext::cli::PictureTower> maxtext::cli::open_picture_tower(const Args& a, const Config&) {
  MAXTEXT_CHECK(!a.has("mmproj") || a.get("mmproj") == "none", UnsupportedError, a.command, " --mmproj: pictures "
                "are not compiled into this program (install libpng-dev and libjpeg62-turbo-dev, as scripts/setup.sh "
                "does, and configure with -DMAXTEXT_CLI_VISION=ON)");
  return nullptr;
}
#endif

int main(int argc, char** argv) {
  using namespace maxtext;
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::cout << kUsage;
      return argc < 2 ? 2 : 0;
    }
    const cli::Args a = cli::parse_args(argc, argv);
    cli::check_options(a);  // an unknown or unused option, or override, is refused by name (cli_options.hpp)
    cli::join_world(a.command);  // mpirun: the ranks that split the model (cli_dist.cpp)
    if (a.command == "logits" || a.command == "generate") {
      const int rc = a.command == "logits" ? cli::cmd_logits(a) : cli::cmd_generate(a);
      cli::leave_world();
      return rc;
    }
    if (a.command == "chat") return cli::cmd_chat(a);
    if (a.command == "info") return cli::cmd_info(a);
    if (a.command == "tokenize" || a.command == "detokenize") return cli::cmd_tokenize(a);
    if (a.command == "template") return cli::cmd_template(a);
    if (a.command == "compare") return cli::cmd_compare(a);
    if (a.command == "serve") return cli::cmd_serve(a);
    if (a.command == "vision") return cli::cmd_vision(a);
    if (a.command == "audio") return cli::cmd_audio(a);
    std::cerr << "maxtext: unknown command '" << a.command << "'\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    cli::fail_world(e.what());  // prints it; split across ranks, it also ends the others
    return 1;
  }
}
