# syntax=docker/dockerfile:1
# One exact Node release for both stages: a rebuild gets the runtime that was tested.
ARG NODE_IMAGE=node:24.21.0-bookworm-slim
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json app.ts server.ts ./
COPY cli cli
COPY plugins plugins
COPY routes routes
COPY schemas schemas
COPY lib lib
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000
WORKDIR /app
# The code stays root's: the runtime user can read and run it, never rewrite it.
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/dist dist
COPY --from=build /app/schemas/tenants.schema.json schemas/tenants.schema.json
USER node
EXPOSE 3000
# Liveness only: an unhealthy Redis must not make the orchestrator restart healthy processes.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# No npm in the way: signals (SIGTERM drain, SIGHUP reload) reach the service directly.
CMD ["node", "dist/server.js"]
