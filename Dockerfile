# syntax=docker/dockerfile:1
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json app.ts server.ts ./
COPY plugins plugins
COPY routes routes
COPY schemas schemas
COPY lib lib
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000
WORKDIR /app
COPY --from=build --chown=node:node /app/package.json ./
COPY --from=build --chown=node:node /app/node_modules node_modules
COPY --from=build --chown=node:node /app/dist dist
COPY --from=build --chown=node:node /app/schemas/tenants.schema.json schemas/tenants.schema.json
# Numeric, so that Kubernetes can check runAsNonRoot (the `node` user of the base image).
USER 1000:1000
EXPOSE 3000 9464
# Liveness only: an unhealthy Redis must not make the orchestrator restart healthy processes.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# No npm in the way: signals (SIGTERM drain, SIGHUP reload) reach the service directly.
CMD ["node", "dist/server.js"]
