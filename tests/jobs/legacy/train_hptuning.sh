#!/bin/bash
# How the legacy census sample submitted its tuning job (its README, as teams copied it into scripts).
BUCKET_NAME=demo-project-data
JOB_NAME=census_$(date +%Y%m%d_%H%M%S)
OUTPUT_PATH=gs://demo-project-models/$JOB_NAME
TRAIN_DATA=gs://$BUCKET_NAME/census/adult.data
EVAL_DATA="gs://${BUCKET_NAME}/census/adult.test"
HPTUNING_CONFIG=hptuning_config.yaml
export REGION=us-central1

gcloud ai-platform jobs submit training $JOB_NAME \
    --stream-logs \
    --job-dir $OUTPUT_PATH \
    --runtime-version 1.14 \
    --python-version 3.5 \
    --config $HPTUNING_CONFIG \
    --module-name trainer.task \
    --package-path trainer/ \
    --region $REGION \
    -- \
    --train-files $TRAIN_DATA \
    --eval-files $EVAL_DATA \
    --train-steps 1000 \
    --verbosity DEBUG  \
    --eval-steps 100  # the sample's defaults
