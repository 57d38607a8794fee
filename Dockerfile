FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY takohost takohost
COPY models models
COPY workers workers
COPY beat beat
COPY host_api host_api
RUN pip install --no-cache-dir . && useradd --create-home takohost
USER takohost
EXPOSE 8080
CMD ["takohost", "api", "--host", "0.0.0.0", "--port", "8080"]
