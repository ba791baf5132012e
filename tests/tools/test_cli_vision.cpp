// tests/tools/test_cli_vision.cpp: `maxtext vision` (tools/cli_vision.cpp) end to end: two picture files (PNG 64x48,
// JPEG 37x23) through the tiny Gemma 3 checkpoint of fixtures/gemma3_vision_nopool/hf (image_size 32), with MaxText's
// and Hugging Face's preprocessing, against tests/reference/gemma3_vision_reference.py's image_tokens_*.npy (Pillow's
// decoding and resize, NumPy's normalisation, the float64 tower). Tolerance: test::tol::f32_logits, as the tower's
// own test for its projected tokens. Refusals: a checkpoint without a vision tower, a missing picture, a bad
// preprocessing name.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/npy.hpp"
#include "support/cli.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

TEST_CASE("maxtext vision: picture files to Gemma 3 soft tokens equal Pillow + the float64 tower", "[cli][vision]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string dir = test::fixtures_dir() + "/gemma3_vision_nopool", img = test::fixtures_dir() + "/images/";
  const std::string pics = " --image " + img + "png_rgb8_64x48.png --image " + img + "jpeg_rgb_q90_420_37x23.jpg";
  for (const char* how : {"maxtext", "hf"}) {
    const std::string out = (std::filesystem::current_path() / (std::string("vision_tokens_") + how + ".npy")).string();
    const std::string text =
        test::run_cli("vision --weights " + dir + "/hf" + pics + " --image-preprocess " + how + " --out " + out);
    CHECK(text.find("256 soft tokens of 32") != std::string::npos);
    test::expect_close(io::read_npy(out), test::npy(dir + "/image_tokens_" + how + ".npy"), test::tol::f32_logits,
                       std::string("vision tokens (") + how + ")");
    std::remove(out.c_str());
  }
  std::string t = test::run_cli_failing("vision --weights " + test::fixtures_dir() + "/gemma3_model/hf --image " + img +
                              "png_rgb8_64x48.png");
  CHECK(t.find("has model_type 'gemma3_text'") != std::string::npos);
  t = test::run_cli_failing("vision --weights " + dir + "/hf --image " + img + "no-such.png");
  CHECK(t.find("no-such.png: cannot open the file") != std::string::npos);
  t = test::run_cli_failing("vision --weights " + dir + "/hf --image " + img + "png_rgb8_64x48.png --image-preprocess pil");
  CHECK(t.find("unknown Gemma 3 image preprocessing 'pil': expected maxtext, hf or llamacpp") != std::string::npos);
  t = test::run_cli_failing("vision --weights " + dir + "/hf");
  CHECK(t.find("vision needs --image FILE") != std::string::npos);
}

TEST_CASE("maxtext logits / generate --image: pictures merged into a Gemma 3 prompt equal the float64 reference",
          "[cli][vision][multimodal]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/gemma3_mm_model (tests/reference/gemma3_multimodal_reference.py): a 7-layer Gemma 3 with a 2-layer tower,
  // prompt ids 2,5,9,<boi>,14,7,<boi>,33,17 (boi = 120 in its config.json), two PNG pictures; logits at
  // test::tol::f32_logits, greedy tokens exact (best-vs-second gaps >= 0.54, meta.json).
  const std::string dir = test::fixtures_dir() + "/gemma3_mm_model";
  const std::string pics = " --image " + dir + "/image_a.png --image " + dir + "/image_b.png";
  const std::string tokens = " --tokens 2,5,9,120,14,7,120,33,17";
  const std::string cwd = std::filesystem::current_path().string() + "/cli_mm_" + std::to_string(::getpid());
  for (const char* layout : {"/hf", "/hf_new"}) {
    INFO(layout);
    const std::string w = " --weights " + dir + layout;
    test::run_cli("logits" + w + tokens + pics + " --out " + cwd + "_logits.npy --image-embeddings-out " + cwd +
                  "_soft.npy");
    test::expect_close(io::read_npy(cwd + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                       std::string("cli logits --image ") + layout);
    test::expect_close(io::read_npy(cwd + "_soft.npy"), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits,
                       std::string("--image-embeddings-out ") + layout);
    // The last tokens decoded one at a time after a first pass holding both pictures.
    test::run_cli("logits" + w + tokens + pics + " --incremental 3 --out " + cwd + "_logits.npy");
    test::expect_close(io::read_npy(cwd + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                       std::string("cli logits --image --incremental 3 ") + layout);
    const std::string text = test::run_cli("generate" + w + tokens + pics + " --max-new-tokens 8");
    CHECK(text.find("tokens[0]: 93,93,115,115,115,115,115,115") != std::string::npos);
  }
  std::remove((cwd + "_logits.npy").c_str());
  std::remove((cwd + "_soft.npy").c_str());
  // Refusals, by name.
  std::string t = test::run_cli_failing("generate --weights " + dir + "/hf" + tokens + " --image " + dir + "/image_a.png");
  CHECK(t.find("the prompt has 2 <start_of_image> marker(s) for 1 picture(s)") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + test::fixtures_dir() + "/gemma3_model/hf --tokens 2,5 --image " + dir +
                  "/image_a.png");
  CHECK(t.find("has model_type 'gemma3_text'") != std::string::npos);
  t = test::run_cli_failing("logits --weights " + dir + "/hf" + tokens + pics + " --incremental 400 --out x.npy");
  CHECK(t.find("hold a picture's soft tokens") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + dir + "/hf" + tokens + " --image-preprocess hf");
  CHECK(t.find("--image-preprocess needs --image") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + dir + "/hf" + tokens + pics + " --spec lookup");
  CHECK(t.find("speculative decoding takes no pictures") != std::string::npos);
}

TEST_CASE("maxtext chat --image: each marker a message writes takes the next picture, the cache is reused across turns",
          "[cli][vision][multimodal][chat]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // The tiny multimodal Gemma 3 with a character-level tokenizer and a Gemma-style chat template made for it
  // (tests/reference/gemma3_mm_chat_tokenizer.py). The first answer must be what `generate` gives for the same
  // rendered prompt (the random model's text means nothing, its tokens must agree); the second turn must reuse the
  // first turn's picture tokens from the cache.
  const std::string dir = test::fixtures_dir() + "/gemma3_mm_model";
  const std::string common = " --weights " + dir + "/hf --tokenizer " + dir + "/chat_tokenizer --image " + dir +
                             "/image_a.png --image " + dir + "/image_b.png --max-new-tokens 6";
  const std::string in = std::filesystem::current_path().string() + "/chat_mm_" + std::to_string(::getpid()) + ".txt";
  {
    std::ofstream f(in);
    f << "look <start_of_image> and <__media__>\nagain\n";
  }
  const std::string chat = test::run_cli("chat" + common + " < " + in);
  std::remove(in.c_str());
  const std::string gen = test::run_cli(
      "generate" + common +
      " --prompt '<start_of_turn>user\nlook <start_of_image> and <__media__><end_of_turn>\n<start_of_turn>model\n'");
  // generate prints the prompt, then the answer, then "tokens[0]: ..."; chat prints each answer on its own line.
  const auto at = gen.find("<start_of_turn>model\n");
  REQUIRE(at != std::string::npos);
  const std::string answer = gen.substr(at + 21, gen.find('\n', at + 21) - (at + 21));
  INFO("generate's answer: '" << answer << "'\nchat:\n" << chat);
  CHECK(!answer.empty());
  CHECK(chat.find(answer + "\n") != std::string::npos);
  CHECK(chat.find("[turn 1: prefilled 546 new tokens of 546 (0 reused from the cache)") != std::string::npos);
  // Turn 2 re-renders the conversation: both pictures (ids 5 .. 522 of it) come from the cache.
  const auto t2 = chat.find("[turn 2: prefilled ");
  REQUIRE(t2 != std::string::npos);
  const auto open = chat.find('(', t2);
  const long reused = std::stol(chat.substr(open + 1));
  CHECK(reused > 530);
  // More markers than pictures: refused by name.
  {
    std::ofstream f(in);
    f << "<start_of_image> <start_of_image> <start_of_image>\n";
  }
  const std::string t = test::run_cli_failing("chat" + common + " < " + in);
  std::remove(in.c_str());
  CHECK(t.find("the prompt has 3 <start_of_image> marker(s) for 2 picture(s)") != std::string::npos);
}

TEST_CASE("maxtext vision / logits --mmproj: Gemma 3's tower from a llama.cpp mmproj GGUF", "[cli][vision][mmproj]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string dir = test::fixtures_dir() + "/gemma3_mm_model";
  const std::string pics = " --image " + dir + "/image_a.png --image " + dir + "/image_b.png";
  const std::string out = std::filesystem::current_path().string() + "/cli_mmproj_" + std::to_string(::getpid()) + ".npy";
  test::run_cli("vision --mmproj " + dir + "/mmproj.gguf" + pics + " --out " + out);
  test::expect_close(io::read_npy(out), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits, "vision --mmproj");
  // The text model from the HF checkpoint (its config.json gives the image token ids), the tower from the mmproj.
  test::run_cli("logits --weights " + dir + "/hf --mmproj " + dir + "/mmproj.gguf --tokens 2,5,9,120,14,7,120,33,17" +
                pics + " --out " + out);
  test::expect_close(io::read_npy(out), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "logits --mmproj");
  std::remove(out.c_str());
  std::string t = test::run_cli_failing("vision --mmproj " + dir + "/hf/model.safetensors" + pics);
  CHECK(t.find("model.safetensors") != std::string::npos);
  t = test::run_cli_failing("vision --weights " + dir + "/hf --mmproj " + dir + "/mmproj.gguf" + pics);
  CHECK(t.find("one of them") != std::string::npos);
}

TEST_CASE("maxtext vision / generate --pan-and-scan: Hugging Face's crops and prompt text, as a Pillow re-statement cuts "
          "and writes them",
          "[cli][vision][multimodal]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  if (std::system("/usr/bin/python3 -c 'import numpy, PIL' > /dev/null 2>&1") != 0) {
    test::skip("/usr/bin/python3 with numpy and Pillow not available");
  }
  // tests/reference/gemma3_pan_and_scan.py writes seeded pictures, their crops as Hugging Face's Gemma3ImageProcessor
  // cuts them (Pillow's crop of the same pixels) and the text Gemma3Processor puts in a picture's place. With
  // --pan-and-scan on, the program must cut the same crops and write the same text: its soft tokens and its
  // generation then equal those of the re-statement's pictures given one by one, with the re-statement's text in the
  // prompt, bit for bit. Pictures: long 2000 x 400 (4 crops of 500), tall 500 x 901 (2 crops of 451 and 450 rows),
  // edge 600 x 500 (ratio exactly 1.2: 2 crops of 300), small 300 x 200 (ratio 1.5, but crops of 150 < 256: none),
  // wide 1100 x 500 (2 crops of 550).
  const std::string dir = std::filesystem::current_path().string() + "/pas_" + std::to_string(::getpid());
  REQUIRE(std::system(("/usr/bin/python3 " + test::source_dir() + "/tests/reference/gemma3_pan_and_scan.py " + dir +
                       " long:2000x400 tall:500x901 edge:600x500 small:300x200 wide:1100x500")
                          .c_str()) == 0);
  struct Ref {
    std::vector<std::string> crops;
    std::string text;
  };
  auto ref = [&](const std::string& name) {
    Ref r;
    std::ifstream f(dir + "/" + name + ".txt");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("text: ", 0) == 0) {
        r.text = line.substr(6);
      } else {
        r.crops.push_back(dir + "/" + line);
      }
    }
    return r;
  };
  const std::map<std::string, std::size_t> expected_crops = {{"long", 4}, {"tall", 2}, {"edge", 2}, {"small", 0}, {"wide", 2}};
  for (const auto& [name, n] : expected_crops) CHECK(ref(name).crops.size() == n);

  // The tower alone: four pictures with pan-and-scan, against the pictures and crops given one by one.
  const std::string tower = " --weights " + test::fixtures_dir() + "/gemma3_mm_model/hf --image-preprocess hf";
  std::string pas_images, one_by_one;
  for (const char* name : {"long", "tall", "edge", "small"}) {
    pas_images += " --image " + dir + "/" + name + ".png";
    one_by_one += " --image " + dir + "/" + name + ".png";
    for (const auto& c : ref(name).crops) one_by_one += " --image " + c;
  }
  const std::string text = test::run_cli("vision" + tower + pas_images + " --pan-and-scan on --out " + dir + "/a.npy");
  CHECK(text.find("long.png (crop 4)") != std::string::npos);
  test::run_cli("vision" + tower + one_by_one + " --out " + dir + "/b.npy");
  const AnyTensor a = io::read_npy(dir + "/a.npy"), b = io::read_npy(dir + "/b.npy");
  REQUIRE(a.shape == b.shape);
  CHECK(a.shape[0] == 4 + 4 + 2 + 2 + 0);
  test::expect_close(a, b, {0.0, 0.0}, "vision --pan-and-scan on vs the crops one by one");

  // generate: the prompt's marker becomes the re-statement's text, the picture is followed by its crops.
  const std::string dirm = test::fixtures_dir() + "/gemma3_mm_model";
  const std::string common = " --weights " + dirm + "/hf --tokenizer " + dirm + "/chat_tokenizer --max-new-tokens 6";
  const Ref wide = ref("wide");
  const std::string gen_a = test::run_cli("generate" + common + " --image " + dir + "/wide.png --pan-and-scan on" +
                                          " --prompt 'look <__media__> now' --image-embeddings-out " + dir + "/ga.npy");
  std::string crops_b;
  for (const auto& c : wide.crops) crops_b += " --image " + c;
  const std::string gen_b = test::run_cli("generate" + common + " --image " + dir + "/wide.png" + crops_b +
                                          " --prompt 'look " + wide.text + " now' --image-embeddings-out " + dir + "/gb.npy");
  CHECK(gen_a.find("1 picture(s) and 2 pan-and-scan crop(s)") != std::string::npos);
  auto tokens_line = [](const std::string& out) {
    const auto at = out.find("tokens[0]: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  INFO("with --pan-and-scan on:\n" << gen_a << "\none by one:\n" << gen_b);
  CHECK(!tokens_line(gen_a).empty());
  CHECK(tokens_line(gen_a) == tokens_line(gen_b));
  CHECK(gen_a.find("look Here is the original image ") != std::string::npos);  // the prompt as generate prints it
  test::expect_close(io::read_npy(dir + "/ga.npy"), io::read_npy(dir + "/gb.npy"), {0.0, 0.0},
                     "generate --pan-and-scan on: the soft tokens");

  // Refusals, by name.
  std::string t = test::run_cli_failing("generate" + common + " --image " + dir + "/wide.png --pan-and-scan on --tokens 2,120,5");
  CHECK(t.find("--pan-and-scan needs --prompt") != std::string::npos);
  t = test::run_cli_failing("generate" + common + " --prompt 'x' --pan-and-scan on");
  CHECK(t.find("--pan-and-scan needs --image") != std::string::npos);
  t = test::run_cli_failing("vision" + tower + " --image " + dir + "/wide.png --pan-and-scan yes");
  CHECK(t.find("--pan-and-scan: expected on or off, found 'yes'") != std::string::npos);
  t = test::run_cli_failing("vision --weights " + dirm + "/hf --image " + dir + "/wide.png --pan-and-scan on --image-preprocess llamacpp");
  CHECK(t.find("llama.cpp's preprocessing (--image-preprocess llamacpp) has no pan-and-scan") != std::string::npos);
  t = test::run_cli_failing("chat" + common + " --pan-and-scan on < /dev/null");
  CHECK(t.find("chat: --pan-and-scan needs --image") != std::string::npos);

  // chat: a message's marker becomes the same text and its picture is followed by its crops: the first answer is
  // what generate gives for the rendered prompt; the second turn reuses the picture and its crops from the cache.
  {
    const std::string in = dir + "/chat.txt";
    {
      std::ofstream f(in);
      f << "look <__media__> now\nagain\n";
    }
    const std::string pics = " --image " + dir + "/wide.png --pan-and-scan on";
    const std::string chat = test::run_cli("chat" + common + pics + " < " + in);
    const std::string one = test::run_cli("generate" + common + pics +
                                          " --prompt '<start_of_turn>user\nlook <__media__> now<end_of_turn>\n"
                                          "<start_of_turn>model\n'");
    const auto at = one.find("<start_of_turn>model\n");
    REQUIRE(at != std::string::npos);
    const std::string answer = one.substr(at + 21, one.find('\n', at + 21) - (at + 21));
    INFO("generate:\n" << one << "\nchat:\n" << chat);
    CHECK(chat.find("1 picture(s) and 2 pan-and-scan crop(s)") != std::string::npos);
    CHECK(!answer.empty());
    CHECK(chat.find(answer + "\n") != std::string::npos);
    const auto t2 = chat.find("[turn 2: prefilled ");
    REQUIRE(t2 != std::string::npos);
    CHECK(std::stol(chat.substr(chat.find('(', t2) + 1)) > 3 * 256);  // the picture and both crops from the cache
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("maxtext vision / logits / generate --image: a Llama 4 checkpoint's pictures equal the float64 reference",
          "[cli][vision][multimodal][llama4]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/llama4_mm_model (tests/reference/llama4_multimodal_reference.py): a 4-layer Llama 4 (MoE, NoPE, chunks of
  // 32) with a 2-layer vision model, tiles of 84 pixels, a character-level tokenizer whose <|image|> is 58; picture a
  // is cut into 2 x 3 tiles and a global tile, picture b into one. Soft tokens and logits at test::tol::f32_logits,
  // greedy tokens exact (best-vs-second gaps >= 0.055, meta.json).
  const std::string dir = test::fixtures_dir() + "/llama4_mm_model";
  const std::string w = " --weights " + dir + "/hf";
  const std::string pics = " --image " + dir + "/image_a.png --image " + dir + "/image_b.png";
  const std::string out = std::filesystem::current_path().string() + "/cli_l4_" + std::to_string(::getpid());
  std::string text = test::run_cli("vision" + w + pics + " --out " + out + "_soft.npy");
  CHECK(text.find("image_a.png (tile 2,3 of 2x3): 9 soft tokens of 32") != std::string::npos);
  CHECK(text.find("image_a.png (global tile)") != std::string::npos);
  CHECK(text.find("image_b.png (1 tile)") != std::string::npos);
  test::expect_close(io::read_npy(out + "_soft.npy"), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits,
                     "llama4 vision --out");
  const std::string tokens = " --tokens 1,58,6,7,21,5,20,11,4,7,29,58,4,17,22,10";
  test::run_cli("logits" + w + tokens + pics + " --out " + out + "_logits.npy");
  test::expect_close(io::read_npy(out + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     "llama4 logits --image");
  // The last tokens one at a time after a pass holding both pictures.
  test::run_cli("logits" + w + tokens + pics + " --incremental 4 --out " + out + "_logits.npy");
  test::expect_close(io::read_npy(out + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     "llama4 logits --image --incremental 4");
  std::remove((out + "_soft.npy").c_str());
  std::remove((out + "_logits.npy").c_str());
  // From text: llama.cpp's <__media__> marker and Llama 4's own, through the checkpoint's tokenizer.
  text = test::run_cli("generate" + w + " --prompt '<|image|>describe <__media__>both'" + pics + " --max-new-tokens 8");
  CHECK(text.find("tokens[0]: 61,61,61,61,61,31,35,63") != std::string::npos);
  // Refusals, by name.
  std::string t = test::run_cli_failing("generate" + w + tokens + " --image " + dir + "/image_a.png");
  CHECK(t.find("the prompt has 2 <|image|> marker(s) for 1 picture(s)") != std::string::npos);
  t = test::run_cli_failing("vision" + w + pics + " --image-preprocess hf");
  CHECK(t.find("Llama 4's pictures are preprocessed as MaxText's processor does") != std::string::npos);
  t = test::run_cli_failing("generate" + w + " --prompt '<|image|>a<|image|>'" + pics + " --pan-and-scan on");
  CHECK(t.find("pan-and-scan is Gemma 3's") != std::string::npos);
  t = test::run_cli_failing("generate" + w + " --tokens 1,58,59,4,58" + pics);
  CHECK(t.find("the prompt already holds a <|patch|>") != std::string::npos);
  // llama.cpp's mmproj file of a Llama 4 vision model (fixtures/llama4_mmproj, written by llama.cpp's own converter)
  // gives the soft tokens of the checkpoint it was converted from, bit for bit.
  const std::string mm = test::fixtures_dir() + "/llama4_mmproj";
  test::run_cli("vision --mmproj " + mm + "/mmproj.gguf" + pics + " --out " + out + "_gguf.npy");
  test::run_cli("vision --weights " + mm + "/hf" + pics + " --out " + out + "_hf.npy");
  const AnyTensor g = io::read_npy(out + "_gguf.npy"), h = io::read_npy(out + "_hf.npy");
  REQUIRE(g.shape == h.shape);
  CHECK(g.shape == std::vector<std::int64_t>{8, 9, 8});
  bool same = true;
  for (std::int64_t i = 0; i < g.numel(); ++i) same = same && g.element(i) == h.element(i);
  CHECK(same);
  std::remove((out + "_gguf.npy").c_str());
  std::remove((out + "_hf.npy").c_str());
}

TEST_CASE("maxtext chat --image: a Llama 4 conversation's pictures, through its chat template, the cache reused",
          "[cli][vision][multimodal][chat][llama4]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/llama4_mm_model/hf carries a Llama 4 style chat template (tokenizer_config.json). The first answer must be
  // what `generate` gives for the same rendered prompt; the second turn must reuse the first turn's pictures.
  const std::string dir = test::fixtures_dir() + "/llama4_mm_model";
  const std::string common = " --weights " + dir + "/hf --image " + dir + "/image_a.png --image " + dir +
                             "/image_b.png --max-new-tokens 6";
  const std::string in = std::filesystem::current_path().string() + "/chat_l4_" + std::to_string(::getpid()) + ".txt";
  {
    std::ofstream f(in);
    f << "look <|image|> and <__media__>\nagain\n";
  }
  const std::string chat = test::run_cli("chat" + common + " < " + in);
  std::remove(in.c_str());
  const std::string gen = test::run_cli("generate" + common +
                                        " --prompt '<|header_start|>user<|header_end|>\n\nlook <|image|> and "
                                        "<__media__><|eot|><|header_start|>assistant<|header_end|>\n\n'");
  const auto at = gen.find("assistant");  // the special tokens print as nothing: the answer follows the last \n\n
  REQUIRE(at != std::string::npos);
  const auto start = gen.find("\n\n", at);
  REQUIRE(start != std::string::npos);
  const std::string answer = gen.substr(start + 2, gen.find('\n', start + 2) - (start + 2));
  INFO("generate's answer: '" << answer << "'\nchat:\n" << chat);
  CHECK(!answer.empty());
  CHECK(chat.find(answer + "\n") != std::string::npos);
  CHECK(chat.find("[turn 1: prefilled 117 new tokens of 117 (0 reused from the cache)") != std::string::npos);
  const auto t2 = chat.find("[turn 2: prefilled ");
  REQUIRE(t2 != std::string::npos);
  CHECK(std::stol(chat.substr(chat.find('(', t2) + 1)) > 100);  // both pictures (72 + 12 soft tokens) from the cache
}

TEST_CASE("maxtext vision / logits / generate / chat --image: a Gemma 4 checkpoint's pictures equal the float64 "
          "reference", "[cli][vision][multimodal][gemma4]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/gemma4_mm_model (tests/reference/gemma4_multimodal_reference.py): a 6-layer Gemma 4 (five sliding layers,
  // one global) with a 2-layer vision encoder, MaxText's fixed picture size 36 x 24 (vision_config.image_size), 6 soft
  // tokens a picture, a character-level tokenizer whose <|image|> is 60 and a Gemma 4 turn template. Soft tokens and
  // logits at test::tol::f32_logits, greedy tokens exact (best-vs-second gaps >= 0.034, meta.json).
  const std::string dir = test::fixtures_dir() + "/gemma4_mm_model";
  const std::string w = " --weights " + dir + "/hf";
  const std::string pics = " --image " + dir + "/image_a.png --image " + dir + "/image_b.png";
  const std::string out = std::filesystem::current_path().string() + "/cli_g4_" + std::to_string(::getpid());
  std::string text = test::run_cli("vision" + w + pics + " --out " + out + "_soft.npy");
  CHECK(text.find("image_a.png: 6 soft tokens of 40") != std::string::npos);
  test::expect_close(io::read_npy(out + "_soft.npy"), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits,
                     "gemma4 vision --out");
  const std::string tokens = " --tokens 2,56,23,21,7,20,51,60,25,10,3,22,29,11,21,29,60,22,10,11,21,43,57,51,56,15,17,6,7,14,51";
  test::run_cli("logits" + w + tokens + pics + " --out " + out + "_logits.npy");
  test::expect_close(io::read_npy(out + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     "gemma4 logits --image");
  test::run_cli("logits" + w + tokens + pics + " --incremental 4 --out " + out + "_logits.npy");
  test::expect_close(io::read_npy(out + "_logits.npy"), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     "gemma4 logits --image --incremental 4");
  std::remove((out + "_soft.npy").c_str());
  std::remove((out + "_logits.npy").c_str());
  // From text, through the checkpoint's tokenizer (llama.cpp's <__media__> marker is rewritten to <|image|>).
  const std::string prompt = "<bos><|turn>user\n<|image|>what is <__media__>this?<turn|>\n<|turn>model\n";
  text = test::run_cli("generate" + w + " --prompt '" + prompt + "'" + pics + " --max-new-tokens 8");
  CHECK(text.find("tokens[0]: 15,3,3,42,42,42,42,47") != std::string::npos);
  // chat: the template renders the same prompt; the first answer is generate's.
  const std::string in = out + "_chat.txt";
  {
    std::ofstream f(in);
    f << "<|image|>what is <__media__>this?\n";
  }
  const std::string chat = test::run_cli("chat" + w + pics + " --max-new-tokens 8 < " + in);
  std::remove(in.c_str());
  INFO(chat);
  CHECK(chat.find("[turn 1: prefilled 45 new tokens of 45 (0 reused from the cache)") != std::string::npos);
  // Refusals, by name.
  std::string t = test::run_cli_failing("generate" + w + tokens + " --image " + dir + "/image_a.png");
  CHECK(t.find("the prompt has 2 <|image|> marker(s) for 1 picture(s)") != std::string::npos);
  t = test::run_cli_failing("vision" + w + pics + " --image-preprocess llamacpp");
  CHECK(t.find("llamacpp is not implemented for Gemma 4") != std::string::npos);
  t = test::run_cli_failing("generate" + w + " --prompt '<|image|>a<|image|>'" + pics + " --pan-and-scan on");
  CHECK(t.find("pan-and-scan is Gemma 3's") != std::string::npos);
  t = test::run_cli_failing("generate" + w + " --tokens 2,61,60 --image " + dir + "/image_a.png");
  CHECK(t.find("already holds an image begin token") != std::string::npos);
  // Hugging Face's preprocessing (preprocessor_config.json: 6 soft tokens at most): picture a keeps its aspect ratio.
  text = test::run_cli("vision" + w + pics + " --image-preprocess hf");
  CHECK(text.find("image_a.png: 4 soft tokens of 40") != std::string::npos);
  CHECK(text.find("image_b.png: 6 soft tokens of 40") != std::string::npos);
}

TEST_CASE("maxtext vision --image: a Qwen3.5 checkpoint's vision encoder equals the float64 reference",
          "[cli][vision][qwen3]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/qwen3_vision (tests/reference/qwen3_vision_reference.py): a 3-block encoder with deepstack mergers, its two
  // pictures as PNG files and a preprocessor_config.json whose pixel budget keeps their sizes (24 x 32, 16 x 16), so
  // Hugging Face's preprocessing gives the fixture's pixel_values. Tokens at test::tol::f32_logits.
  const std::string dir = test::fixtures_dir() + "/qwen3_vision";
  const std::string w = " --weights " + dir + "/hf";
  const std::string pics = " --image " + dir + "/image_0.png --image " + dir + "/image_1.png";
  const std::string out = std::filesystem::current_path().string() + "/cli_q3_" + std::to_string(::getpid()) + ".npy";
  const std::string text = test::run_cli("vision" + w + pics + " --image-preprocess hf --out " + out);
  CHECK(text.find("image_0.png: 12 soft tokens of 24") != std::string::npos);
  CHECK(text.find("image_1.png: 4 soft tokens of 24") != std::string::npos);
  test::expect_close(io::read_npy(out), test::npy(dir + "/merged.npy"), test::tol::f32_logits, "qwen3 vision --out");
  std::remove(out.c_str());
  std::string t = test::run_cli_failing("vision" + w + pics + " --image-preprocess llamacpp");
  CHECK(t.find("llamacpp is not implemented for Qwen3") != std::string::npos);
}

TEST_CASE("maxtext logits|generate --image: a Qwen3.5 checkpoint's pictures enter its text model at MRoPE's 3-D positions "
          "as the float64 reference merges them", "[cli][vision][qwen3]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  // fixtures/qwen3_5_mm_model (tests/reference/qwen3_5_multimodal_reference.py): the qwen3_5 text decoder with a
  // 2-block encoder, the two pictures through Hugging Face's preprocessing (its preprocessor_config.json keeps their
  // sizes), each <|image_pad|> (62) after <|vision_start|> (60) expanded; the greedy tokens exactly. The logits come
  // through the program's own encoder, whose rows differ from the float64 ones by 1.9e-6 (5e-7 of their largest), which
  // the 4-layer decoder (routed experts, Gated DeltaNet) carries to 1.4e-5 in the logits (3.8e-6 of their largest,
  // 3.6): bound 1e-5 x max(1, max |logit|). The library's test feeds the reference rows and holds f32_logits.
  const std::string dir = test::fixtures_dir() + "/qwen3_5_mm_model";
  const std::string w = " --weights " + dir + "/hf --image-preprocess hf";
  const std::string pics = " --image " + dir + "/image_0.png --image " + dir + "/image_1.png";
  const std::string out = std::filesystem::current_path().string() + "/cli_q35_" + std::to_string(::getpid()) + ".npy";
  const std::string tokens = " --tokens 37,57,41,59,59,60,62,61,40,54,49,22,60,62,61,54,16,52,23,36,10,28,54,15,43";
  test::run_cli("logits" + w + tokens + pics + " --out " + out);
  test::expect_close_scaled(io::read_npy(out), test::npy(dir + "/logits.npy").reshaped({1, 39, 64}), 1e-5,
                            "qwen3.5 logits --image");
  test::run_cli("logits" + w + tokens + pics + " --incremental 5 --out " + out);
  test::expect_close_scaled(io::read_npy(out), test::npy(dir + "/logits.npy").reshaped({1, 39, 64}), 1e-5,
                            "qwen3.5 logits --image --incremental 5");
  std::remove(out.c_str());
  const std::string text = test::run_cli("generate" + w + tokens + pics + " --max-new-tokens 4");
  CHECK(text.find("tokens[0]: 32,24,9,56") != std::string::npos);
  std::string t = test::run_cli_failing("generate" + w + " --tokens 1,2,3" + pics);
  CHECK(t.find("the prompt has 0 <|image_pad|> marker(s) for 2 picture(s)") != std::string::npos);
  t = test::run_cli_failing("generate" + w + " --tokens 1,62,3 --image " + dir + "/image_0.png");
  CHECK(t.find("do not follow a <|vision_start|>") != std::string::npos);
}
