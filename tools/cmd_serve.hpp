// tools/cmd_serve.hpp: `maxtext serve`: an OpenAI-compatible HTTP server over one model, on cpp-httplib (Debian's
// libcpp-httplib-dev). The API (server/openai.hpp) and the slots (server/engine.hpp) are the library's; this file is
// the HTTP side: routes, the API key, server-sent events, the thread pool, the request log and shutdown.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models (also without the /v1 prefix, as
// llama-server), GET /health (no key needed). Bodies over --max-body bytes get 413 before they are read whole.
// A streamed response stops at the next token once the client goes away (its write fails); a request that is not
// streamed runs to its end (cpp-httplib 0.11 cannot tell that the peer left without writing to it).
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include <httplib.h>
#include <pthread.h>

#include "maxtext/core/error.hpp"
#include "maxtext/server/engine.hpp"
#include "maxtext/server/openai.hpp"

namespace maxtext::cli {

struct ServeOptions {
  std::string host = "127.0.0.1";  ///< loopback by default: --host 0.0.0.0 opens it to the network
  int port = 8080;                 ///< 0: any free port (printed)
  std::string api_key;             ///< non-empty: every /v1 route needs "Authorization: Bearer <key>"
  std::size_t max_body = 8u << 20;  ///< bytes of a request body
};

namespace serve_detail {

inline std::string dump(const server::Json& j) {
  return j.dump(-1, ' ', false, server::Json::error_handler_t::replace);
}

inline void send_json(httplib::Response& res, int status, const server::Json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

inline void send_error(httplib::Response& res, const server::RequestError& e) {
  send_json(res, e.status(), e.to_json());
}

/// "data: <json>\n\n" on the stream; false when the client is gone.
inline bool send_event(httplib::DataSink& sink, const std::string& payload) {
  const std::string s = "data: " + payload + "\n\n";
  return sink.is_writable() && sink.write(s.data(), s.size());
}

/// Whether the request carries the key (constant-time comparison of equal-length strings).
inline bool authorised(const httplib::Request& req, const std::string& key) {
  if (key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string want = "Bearer " + key;
  if (h.size() != want.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < h.size(); ++i) diff |= static_cast<unsigned char>(h[i] ^ want[i]);
  return diff == 0;
}

}  // namespace serve_detail

/// SIGINT and SIGTERM blocked in the calling thread and every thread it starts after: call it first, before the
/// model (OpenMP's threads) and the engine (the slots' threads) exist, so that run_serve's sigwait receives them.
inline sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

/// Serves until SIGINT or SIGTERM (blocked beforehand: block_stop_signals). Notes (the address, one line per request)
/// go to `log`.
inline int run_serve(server::Engine& engine, const ServeOptions& so, std::ostream& log) {
  using namespace serve_detail;
  const server::EngineOptions& eo = engine.options();
  const std::int64_t created = server::unix_time();
  std::mutex log_mu;
  std::atomic<std::uint64_t> next_id{0};
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(log_mu);
    log << s << "\n" << std::flush;
  };

  httplib::Server svr;
  // One thread per running or waiting request, and a few for /health, /v1/models and refusals: the engine's queue is
  // the bound on waiting requests.
  const auto threads = static_cast<std::size_t>(eo.slots + eo.queue + 4);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(so.max_body);
  svr.set_keep_alive_timeout(2);
  svr.set_read_timeout(30, 0);
  svr.set_write_timeout(30, 0);

  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* what = res.status == 404 ? "no such route" : res.status == 413 ? "request body too large" : "error";
    send_json(res, res.status,
              server::RequestError(res.status, "invalid_request_error", "",
                                   str(what, ": ", req.method, " ", req.path))
                  .to_json());
  });
  svr.set_exception_handler([&](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    note(str("maxtext serve: internal error: ", msg));
    send_json(res, 500, server::RequestError(500, "server_error", "", msg).to_json());
  });

  auto guard = [&](const httplib::Request& req, httplib::Response& res) {
    if (authorised(req, so.api_key)) return true;
    send_json(res, 401,
              server::Json{{"error",
                            {{"message", "missing or wrong API key (send the header 'Authorization: Bearer <key>')"},
                             {"type", "invalid_request_error"},
                             {"param", nullptr},
                             {"code", "invalid_api_key"}}}});
    return false;
  };

  auto models = [&](const httplib::Request& req, httplib::Response& res) {
    if (guard(req, res)) send_json(res, 200, server::models_json(eo.model_id, created));
  };
  svr.Get("/v1/models", models);
  svr.Get("/models", models);
  svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    const server::EngineStats s = engine.stats();
    send_json(res, 200,
              server::Json{{"status", "ok"},
                           {"slots", s.slots},
                           {"running", s.running},
                           {"waiting", s.waiting},
                           {"served", s.served},
                           {"refused_busy", s.refused_busy},
                           {"cancelled", s.cancelled},
                           {"prompt_tokens", s.prompt_tokens},
                           {"cached_tokens", s.cached_tokens},
                           {"generated_tokens", s.generated_tokens},
                           {"decode_passes", s.batching.decode_passes},
                           {"decode_steps", s.batching.decode_steps},
                           {"shared_tokens", s.batching.shared_tokens},
                           {"kv_bytes", s.kv_bytes},
                           {"kv_pages", s.kv_pages.pages},
                           {"kv_pages_used", s.kv_pages.pages_used}});
  });

  auto complete = [&](server::Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (!guard(req, res)) return;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      server::Json body;
      try {
        body = server::Json::parse(req.body);
      } catch (const server::Json::exception& e) {
        server::bad_request("", str("the request body is not JSON: ", e.what()));
      }
      const server::Request r = endpoint == server::Endpoint::chat ? server::parse_chat_request(body)
                                                                   : server::parse_completion_request(body);
      const std::string id = str(endpoint == server::Endpoint::chat ? "chatcmpl-" : "cmpl-", created, "-", next_id++);
      const std::int64_t when = server::unix_time();
      std::shared_ptr<server::Engine::Job> job = engine.admit(r);  // 400 or 503 here, before any byte is sent
      auto log_done = [&note, t0, id](const server::Outcome& o, const char* how) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        note(str("maxtext serve: ", id, " ", how, ": prompt ", o.prompt_tokens, " tokens (", o.cached_tokens,
                 " cached), generated ", o.tokens.size(), " (", models::to_string(o.finish), ") in ", s, " s"));
      };
      if (!r.stream) {
        const server::Outcome o = job->run();
        send_json(res, 200, server::response_json(r, o, id, eo.model_id, when, job->prompt_text()));
        log_done(o, "done");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream", [job, r, id, when, &eo, log_done](std::size_t, httplib::DataSink& sink) {
            bool first = true, open = true;
            auto piece = [&](std::string_view d) {
              open = open && send_event(sink, dump(server::chunk_json(r, id, eo.model_id, when, std::string(d),
                                                                      first, nullptr)));
              first = false;
              return open;
            };
            if (r.endpoint == server::Endpoint::chat) piece("");  // the role first, as OpenAI's stream
            server::Outcome o;
            try {
              o = job->run(piece);
            } catch (const server::RequestError& e) {
              send_event(sink, dump(e.to_json()));
              sink.done();
              return true;
            } catch (const std::exception& e) {
              send_event(sink, dump(server::RequestError(500, "server_error", "", e.what()).to_json()));
              sink.done();
              return true;
            }
            if (open) {
              if (!o.tool_calls.empty()) {
                send_event(sink, dump(server::tool_calls_chunk_json(id, eo.model_id, when, o.tool_calls)));
              }
              send_event(sink, dump(server::chunk_json(r, id, eo.model_id, when, "", first, server::finish_reason(o))));
              if (r.include_usage) send_event(sink, dump(server::usage_chunk_json(r, id, eo.model_id, when, o)));
              const std::string done = "data: [DONE]\n\n";
              if (sink.is_writable()) sink.write(done.data(), done.size());
            }
            log_done(o, open ? "streamed" : "client left");
            sink.done();
            return true;
          });
    } catch (const server::RequestError& e) {
      send_error(res, e);
      note(str("maxtext serve: ", req.method, " ", req.path, " refused (", e.status(), "): ", e.what()));
    }
  };
  auto chat = [&](const httplib::Request& q, httplib::Response& s) { complete(server::Endpoint::chat, q, s); };
  auto text = [&](const httplib::Request& q, httplib::Response& s) { complete(server::Endpoint::completion, q, s); };
  svr.Post("/v1/chat/completions", chat);
  svr.Post("/chat/completions", chat);
  svr.Post("/v1/completions", text);
  svr.Post("/completions", text);

  int port = so.port;
  if (port == 0) {
    port = svr.bind_to_any_port(so.host);
    MAXTEXT_CHECK(port > 0, IoError, "serve: cannot bind to ", so.host, " on any port");
  } else {
    MAXTEXT_CHECK(svr.bind_to_port(so.host, port), IoError, "serve: cannot bind to ", so.host, ":", port,
                  " (in use, or not an address of this machine)");
  }

  // SIGINT / SIGTERM end the server from a thread of their own (sigwait), not from a signal handler: running
  // generations stop at their next token, then the listener closes.
  const sigset_t signals = block_stop_signals();  // already blocked by the caller; the set to wait for
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (signalled.exchange(true)) return;  // woken by the listener's end below
    note(str("maxtext serve: signal ", sig, ": stopping"));
    engine.stop();
    svr.stop();
  });

  note(str("maxtext serve: listening on http://", so.host, ":", port, " (model '", eo.model_id, "', ", eo.slots,
           eo.slots == 1 ? " slot" : " slots", " of ", eo.ctx, " tokens, queue ", eo.queue,
           ", tool calls: ", eo.tool_format == server::ToolFormat::none ? "none" : server::to_string(eo.tool_format),
           so.api_key.empty() ? "" : ", API key required", ")"));
  const bool ok = svr.listen_after_bind();
  if (!signalled.exchange(true)) pthread_kill(waiter.native_handle(), SIGTERM);  // the listener failed by itself
  waiter.join();
  return ok ? 0 : 1;
}

}  // namespace maxtext::cli
