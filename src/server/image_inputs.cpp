#include "server/image_inputs.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>

namespace mx {
namespace {

HttpError image_error(size_t index, const std::string& what) {
  return {400, "image " + std::to_string(index + 1) + ": " + what, "invalid_request_error",
          "messages"};
}

bool web_url(const std::string& url) {
  return url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
}

}  // namespace

Result<std::string> fetch_image_url(const std::string& url, const ImageServing& serving) {
  const size_t scheme_end = url.find("://") + 3;
  const size_t path_at = url.find('/', scheme_end);
  const std::string origin = url.substr(0, path_at);
  const std::string path = path_at == std::string::npos ? "/" : url.substr(path_at);
  if (origin.size() <= scheme_end) return invalid_argument("the URL names no host");
  httplib::Client cli(origin);
  if (!cli.is_valid()) return invalid_argument("the URL's host is not valid");
  const auto limit = std::chrono::duration<double>(serving.fetch_timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(limit).count();
  cli.set_connection_timeout(us / 1000000, us % 1000000);
  cli.set_read_timeout(us / 1000000, us % 1000000);
  cli.set_follow_location(true);
  cli.enable_server_certificate_verification(true);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string body, why;
  int status = 0;
  auto res = cli.Get(
      path,
      [&](const httplib::Response& r) {
        status = r.status;
        if (status >= 300 && status < 400) return true;  // followed by the client
        if (status != 200) return false;
        const uint64_t declared =
            std::strtoull(r.get_header_value("Content-Length").c_str(), nullptr, 10);
        if (declared > static_cast<uint64_t>(serving.fetch_max_bytes)) {
          why = "the image is " + std::to_string(declared) + " bytes, above the limit of " +
                std::to_string(serving.fetch_max_bytes) + " (--image-url-max-bytes)";
          return false;
        }
        return true;
      },
      [&](const char* data, size_t n) {
        if (status != 200) return true;  // a redirect's body
        if (body.size() + n > static_cast<size_t>(serving.fetch_max_bytes)) {
          why = "the image passed the limit of " + std::to_string(serving.fetch_max_bytes) +
                " bytes (--image-url-max-bytes)";
          return false;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          why = "fetching took longer than " + std::to_string(serving.fetch_timeout_s) +
                " s (--image-url-timeout)";
          return false;
        }
        body.append(data, n);
        return true;
      });
  if (!why.empty()) return invalid_argument(why);
  if (status != 0 && status != 200) {
    return invalid_argument("fetching the image got HTTP " + std::to_string(status));
  }
  if (!res) {
    std::string cause = httplib::to_string(res.error());
    if (res.error() == httplib::Error::SSLServerVerification) {
      cause += " (the server's certificate does not verify)";
    } else if (res.error() == httplib::Error::Read || res.error() == httplib::Error::Connection) {
      cause += " (within " + std::to_string(serving.fetch_timeout_s) + " s)";
    }
    return invalid_argument("cannot fetch the image: " + cause);
  }
  return body;
}

std::optional<HttpError> load_request_images(const std::vector<std::string>& urls,
                                             const ImageServing& serving,
                                             std::vector<PixelPatches>* out) {
  out->clear();
  for (size_t i = 0; i < urls.size(); ++i) {
    const std::string& url = urls[i];
    Result<Image> img = invalid_argument("");
    if (url.rfind("data:", 0) == 0) {
      img = decode_data_uri(url, serving.limits);
    } else if (web_url(url) && !serving.fetch_urls) {
      return image_error(i,
                         "image URLs are not fetched by this server (--no-image-urls); send "
                         "the image inline as a data: URI (data:image/png;base64,...)");
    } else if (web_url(url)) {
      auto bytes = fetch_image_url(url, serving);
      if (!bytes.is_ok()) return image_error(i, url + ": " + bytes.status().message());
      img = decode_image(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(),
                         serving.limits);
    } else {
      return image_error(i, "the URL is neither a data: URI nor http(s)");
    }
    if (!img.is_ok()) return image_error(i, img.status().message());
    auto px = preprocess_image(*img, serving.preprocess);
    if (!px.is_ok()) return image_error(i, px.status().message());
    out->push_back(std::move(*px));
  }
  return std::nullopt;
}

ImageLoader::ImageLoader(const ImageServing& serving, int threads) : serving_(serving) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

ImageLoader::~ImageLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (Job& j : jobs_) j.done(std::nullopt, {}, true);
}

void ImageLoader::load(std::vector<std::string> urls, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back({std::move(urls), std::move(done)});
  }
  wake_.notify_one();
}

void ImageLoader::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::vector<PixelPatches> images;
    auto err = load_request_images(job.urls, serving_, &images);
    job.done(std::move(err), std::move(images), false);
  }
}

}  // namespace mx
